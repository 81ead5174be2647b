//! Every well-known label, annotation, finalizer, namespace and field manager of KubeStellar
//! and of the OCM pieces it relies on, in one place. The values are upstream's, verbatim: a
//! re-implementation that renamed any of them would not interoperate.

/// API group of the control objects (and of WorkStatus).
pub const CONTROL_GROUP: &str = "control.kubestellar.io";
/// Their version.
pub const CONTROL_VERSION: &str = "v1alpha1";
/// OCM's cluster API group (ManagedCluster).
pub const CLUSTER_GROUP: &str = "cluster.open-cluster-management.io";
/// OCM's work API group (ManifestWork, AppliedManifestWork).
pub const WORK_GROUP: &str = "work.open-cluster-management.io";
/// Version of both OCM groups.
pub const OCM_VERSION: &str = "v1";

/// On a WDS object, `"true"` requests per-WEC Go template expansion of its strings.
pub const EXPAND_TEMPLATES_ANNOTATION: &str = "control.kubestellar.io/expand-templates";
/// ITS namespace of the per-WEC customization-property ConfigMaps (named like the WEC).
pub const CUSTOMIZATION_PROPERTIES_NAMESPACE: &str = "customization-properties";
/// WDS namespace of the CombinedStatus objects of cluster-scoped workload objects.
pub const REPORT_NAMESPACE: &str = "kubestellar-report";

/// On a WDS object (copied to the WEC object and its WorkStatus): singleton status return is
/// active for it.
pub const SINGLETON_STATUS_LABEL: &str = "managed-by.kubestellar.io/singletonstatus";
/// On a WDS object: multi-WEC status return is active for it.
pub const MULTIWEC_STATUS_LABEL: &str = "managed-by.kubestellar.io/multiwecstatus";
/// Prefix of the legacy "managed by KubeStellar" labels the status add-on still honours.
pub const MANAGED_BY_LABEL_PREFIX: &str = "managed-by.kubestellar.io";
/// Prefix of the transport's labels; a ManifestWork carrying one is KubeStellar's.
pub const TRANSPORT_LABEL_PREFIX: &str = "transport.kubestellar.io";
/// On a Service: `nodeport` keeps its `nodePort`s through the transport.
pub const PRESERVE_ANNOTATION: &str = "control.kubestellar.io/preserve";
/// The [`PRESERVE_ANNOTATION`] value that keeps node ports.
pub const PRESERVE_NODEPORT: &str = "nodeport";

/// ManifestWork (and WorkStatus) label: the Binding it carries objects of.
pub const BINDING_LABEL: &str = "transport.kubestellar.io/originOwnerReferenceBindingKey";
/// ManifestWork (and WorkStatus) label: the WDS it comes from.
pub const WDS_LABEL: &str = "transport.kubestellar.io/originWdsName";
/// ManifestWork annotation: the Binding generation it was built from (upstream's; kept for
/// compatibility, not used to decide rewrites).
pub const BINDING_GENERATION_ANNOTATION: &str =
    "transport.kubestellar.io/originOwnerReferenceBindingGeneration";

/// Finalizer the binding controller keeps on every live BindingPolicy.
pub const BINDING_POLICY_FINALIZER: &str = "bindingpolicy.kubestellar.io/kscontroller";
/// Finalizer the transport keeps on every live Binding until its ManifestWorks are gone.
pub const BINDING_FINALIZER: &str = "transport.kubestellar.io/object-cleanup";

/// CombinedStatus label: API group of the workload object.
pub const CS_GROUP_LABEL: &str = "status.kubestellar.io/api-group";
/// CombinedStatus label: resource (lowercase plural) of the workload object.
pub const CS_RESOURCE_LABEL: &str = "status.kubestellar.io/resource";
/// CombinedStatus label: namespace of the workload object.
pub const CS_NAMESPACE_LABEL: &str = "status.kubestellar.io/namespace";
/// CombinedStatus label: name of the workload object.
pub const CS_NAME_LABEL: &str = "status.kubestellar.io/name";
/// CombinedStatus label: name of the BindingPolicy.
pub const CS_POLICY_LABEL: &str = "status.kubestellar.io/binding-policy";

/// Finalizer the work agent keeps on ManifestWorks (hub side).
pub const MANIFEST_WORK_FINALIZER: &str =
    "cluster.open-cluster-management.io/manifest-work-cleanup";
/// Finalizer the work agent keeps on AppliedManifestWorks (WEC side).
pub const APPLIED_MANIFEST_WORK_FINALIZER: &str =
    "cluster.open-cluster-management.io/applied-manifest-work-cleanup";
/// Default server-side apply field manager of the work agent.
pub const WORK_AGENT_FIELD_MANAGER: &str = "work-agent";

/// OCM's limit on the total size of a ManifestWork's manifests (the hub webhook's, bytes).
pub const MANIFEST_WORK_SIZE_LIMIT: usize = 500 * 1024;
/// The transport's default `--max-size-wrapped` (bytes of JSON per ManifestWork).
pub const DEFAULT_MAX_SIZE_WRAPPED: usize = 512_000;
