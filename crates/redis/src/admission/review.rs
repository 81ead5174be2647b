//! The `admission.k8s.io/v1` AdmissionReview wire format, and field errors rendered the way
//! Kubernetes (and upstream's controller-runtime webhooks) render them.
//!
//! Contract: [`Request`] is read from the API server's review; [`Response`] is sent back inside
//! [`Response::into_review`]. A denial carries code 422 (`Invalid`), the errors as one message
//! (`<path>: <kind>: <detail>`, several as `[a, b]`, as `field.ErrorList.ToAggregate()`
//! prints them) and one cause per error; warnings are passed on as given.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The request part of an AdmissionReview.
#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// Echoed back in the response.
    pub uid: String,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    #[serde(default)]
    pub operation: String,
    /// Namespace of the object.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Name of the object (empty for generateName creates).
    #[serde(default)]
    pub name: String,
    /// The object as it would be stored.
    #[serde(default)]
    pub object: Option<Value>,
    /// The stored object (updates).
    #[serde(default)]
    pub old_object: Option<Value>,
}

#[derive(Deserialize)]
struct Review {
    request: Option<Request>,
}

/// Reads the request out of an AdmissionReview body.
pub fn parse(body: &[u8]) -> Result<Request, String> {
    let review: Review =
        serde_json::from_slice(body).map_err(|e| format!("invalid AdmissionReview: {e}"))?;
    review
        .request
        .ok_or_else(|| "AdmissionReview without a request".to_owned())
}

/// How a field is wrong (Kubernetes' `field.ErrorType`).
#[derive(Clone, Debug, PartialEq)]
pub enum ErrorKind {
    /// A value that is not allowed (`Invalid value: <value>`).
    Invalid(Value),
    /// A value that must be given.
    Required,
    /// A value that may not be given, or not changed like this.
    Forbidden,
    /// A referenced object that does not exist (`Not found: <value>`).
    NotFound(Value),
    /// The check itself failed (the API could not be read).
    Internal,
}

/// One rejected field.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    /// The field path (`spec.storage.size`).
    pub path: String,
    /// How it is wrong.
    pub kind: ErrorKind,
    /// Why, in words.
    pub detail: String,
}

impl FieldError {
    /// `Invalid value`.
    pub fn invalid(path: &str, value: impl Serialize, detail: impl Into<String>) -> Self {
        Self::new(path, ErrorKind::Invalid(json!(value)), detail)
    }
    /// `Required value`.
    pub fn required(path: &str, detail: impl Into<String>) -> Self {
        Self::new(path, ErrorKind::Required, detail)
    }
    /// `Forbidden`.
    pub fn forbidden(path: &str, detail: impl Into<String>) -> Self {
        Self::new(path, ErrorKind::Forbidden, detail)
    }
    /// `Not found`.
    pub fn not_found(path: &str, value: impl Serialize) -> Self {
        Self::new(path, ErrorKind::NotFound(json!(value)), "")
    }
    /// `Internal error`.
    pub fn internal(path: &str, detail: impl Into<String>) -> Self {
        Self::new(path, ErrorKind::Internal, detail)
    }

    fn new(path: &str, kind: ErrorKind, detail: impl Into<String>) -> Self {
        Self {
            path: path.to_owned(),
            kind,
            detail: detail.into(),
        }
    }

    fn reason(&self) -> &'static str {
        match self.kind {
            ErrorKind::Invalid(_) => "FieldValueInvalid",
            ErrorKind::Required => "FieldValueRequired",
            ErrorKind::Forbidden => "FieldValueForbidden",
            ErrorKind::NotFound(_) => "FieldValueNotFound",
            ErrorKind::Internal => "InternalError",
        }
    }

    // The message without the path, as in a StatusCause.
    fn body(&self) -> String {
        let (label, value) = match &self.kind {
            ErrorKind::Invalid(v) => ("Invalid value", Some(v)),
            ErrorKind::Required => ("Required value", None),
            ErrorKind::Forbidden => ("Forbidden", None),
            ErrorKind::NotFound(v) => ("Not found", Some(v)),
            ErrorKind::Internal => ("Internal error", None),
        };
        let mut s = label.to_owned();
        if let Some(v) = value {
            s.push_str(&format!(": {v}"));
        }
        if !self.detail.is_empty() {
            s.push_str(&format!(": {}", self.detail));
        }
        s
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.body())
    }
}

/// The errors as one message, as Go's `utilerrors.NewAggregate` prints them.
pub fn aggregate(errors: &[FieldError]) -> String {
    match errors {
        [one] => one.to_string(),
        many => format!(
            "[{}]",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The response part of an AdmissionReview.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Response {
    /// The request's uid.
    pub uid: String,
    /// Whether the request may proceed.
    pub allowed: bool,
    /// Why not (denials only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
    /// A base64 JSON patch (mutations only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// `JSONPatch` when there is a patch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<String>,
    /// Warnings shown to the client.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl Response {
    /// Allows the request.
    pub fn allow(uid: &str) -> Self {
        Self {
            uid: uid.to_owned(),
            allowed: true,
            status: None,
            patch: None,
            patch_type: None,
            warnings: Vec::new(),
        }
    }

    /// Allows with `warnings`, or denies with `errors` (and the warnings) when there are any.
    pub fn verdict(uid: &str, errors: &[FieldError], warnings: Vec<String>) -> Self {
        let mut r = if errors.is_empty() {
            Self::allow(uid)
        } else {
            Self::deny(uid, errors)
        };
        r.warnings = warnings;
        r
    }

    /// Denies with `errors` (code 422, reason `Invalid`).
    pub fn deny(uid: &str, errors: &[FieldError]) -> Self {
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| json!({"reason": e.reason(), "message": e.body(), "field": e.path}))
            .collect();
        let mut r = Self::allow(uid);
        r.allowed = false;
        r.status = Some(json!({
            "status": "Failure",
            "code": 422,
            "reason": "Invalid",
            "message": aggregate(errors),
            "details": {"causes": causes},
        }));
        r
    }

    /// Denies a request that could not be read (code 400).
    pub fn bad_request(uid: &str, message: &str) -> Self {
        let mut r = Self::allow(uid);
        r.allowed = false;
        r.status = Some(json!({
            "status": "Failure", "code": 400, "reason": "BadRequest", "message": message,
        }));
        r
    }

    /// Allows with a JSON patch (`ops`), or without one when `ops` is empty.
    pub fn patched(uid: &str, ops: &[Value]) -> Self {
        let mut r = Self::allow(uid);
        if !ops.is_empty() {
            let bytes = serde_json::to_vec(ops).unwrap_or_default();
            r.patch = Some(base64::engine::general_purpose::STANDARD.encode(bytes));
            r.patch_type = Some("JSONPatch".into());
        }
        r
    }

    /// The AdmissionReview carrying this response.
    pub fn into_review(self) -> Value {
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": self,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_print_like_kubernetes_field_errors() {
        let cases = [
            (
                FieldError::invalid(
                    "spec.instances",
                    2,
                    "sentinel mode requires at least 3 redis instances",
                ),
                "spec.instances: Invalid value: 2: sentinel mode requires at least 3 redis instances",
            ),
            (
                FieldError::required(
                    "spec.caSecret",
                    "caSecret is required when tlsSecret is set",
                ),
                "spec.caSecret: Required value: caSecret is required when tlsSecret is set",
            ),
            (
                FieldError::forbidden("spec.storage.size", "no"),
                "spec.storage.size: Forbidden: no",
            ),
            (
                FieldError::not_found("spec.bootstrap.backupName", "b1"),
                "spec.bootstrap.backupName: Not found: \"b1\"",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
        let two = [
            FieldError::forbidden("a", "x"),
            FieldError::forbidden("b", "y"),
        ];
        assert_eq!(aggregate(&two), "[a: Forbidden: x, b: Forbidden: y]");
    }

    #[test]
    fn responses_are_admission_reviews() {
        let deny = Response::deny("u1", &[FieldError::forbidden("spec.x", "no")]).into_review();
        assert_eq!(deny["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(deny["response"]["uid"], "u1");
        assert_eq!(deny["response"]["allowed"], false);
        assert_eq!(deny["response"]["status"]["code"], 422);
        assert_eq!(
            deny["response"]["status"]["message"],
            "spec.x: Forbidden: no"
        );
        assert_eq!(
            deny["response"]["status"]["details"]["causes"][0]["field"],
            "spec.x"
        );

        let patched = Response::patched("u2", &[json!({"op": "add", "path": "/a", "value": 1})]);
        assert_eq!(patched.patch_type.as_deref(), Some("JSONPatch"));
        let raw = base64::engine::general_purpose::STANDARD
            .decode(patched.patch.expect("patch"))
            .expect("base64");
        assert_eq!(
            serde_json::from_slice::<Value>(&raw).expect("json"),
            json!([{"op": "add", "path": "/a", "value": 1}])
        );
        assert_eq!(Response::patched("u3", &[]).patch, None);
    }

    #[test]
    fn requests_are_read_from_reviews() {
        let body = json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": "CREATE", "namespace": "ns", "name": "n",
                "kind": {"group": "redis.io", "version": "v1", "kind": "RedisCluster"},
                "object": {"spec": {}}, "oldObject": null},
        });
        let req = parse(body.to_string().as_bytes()).expect("parse");
        assert_eq!((req.uid.as_str(), req.operation.as_str()), ("u", "CREATE"));
        assert_eq!(req.object, Some(json!({"spec": {}})));
        assert_eq!(req.old_object, None);
        assert!(parse(b"{}").is_err());
        assert!(parse(b"not json").is_err());
    }
}
