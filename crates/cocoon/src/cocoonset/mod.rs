//! The CocoonSet controller.
