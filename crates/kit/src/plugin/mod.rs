//! What every operator's kubectl plugin shares: connecting like kubectl ([`kubeconfig`]) and
//! printing like it ([`table`]).

pub mod kubeconfig;
pub mod table;
