//! The CocoonHibernation controller.
