//! Reading the API server's errors.
//!
//! Contract: [`already_exists`] is true only for the answer to a create whose object exists
//! (409 with reason `AlreadyExists`). A 409 with another reason (`Conflict`: the write raced
//! another one, which a create can also get) says nothing about the object: treating it as
//! "exists" would skip a create that never happened, and a caller that records the object as
//! made (a spec patch naming it, a status that moves on) would wait for it forever.

/// Whether `err` says the object a create named already exists.
pub fn already_exists(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("", reason)
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn only_an_already_exists_answer_means_the_object_exists() {
        assert!(already_exists(&api(409, "AlreadyExists")));
        // A conflict answer to a create: nothing was made.
        assert!(!already_exists(&api(409, "Conflict")));
        assert!(!already_exists(&api(500, "AlreadyExists")));
        assert!(!already_exists(
            &kube::Error::LinesCodecMaxLineLengthExceeded
        ));
    }
}
