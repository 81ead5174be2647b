//! vk-cocoon simulator (test support).
