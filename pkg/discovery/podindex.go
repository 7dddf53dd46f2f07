package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// PodInfo says where a container runs in Kubernetes.
type PodInfo struct {
	// Namespace is the pod's namespace.
	Namespace string
	// Name is the pod's name.
	Name string
	// UID is the pod's UID (metadata.uid).
	UID string
	// Container is the container's name in the pod spec. [PodIndex.LookupPod] knows it only
	// for a pod with one container and no init or ephemeral containers; else "".
	Container string
	// Image is that container's image as the pod spec names it ("" when Container is).
	Image string
	// Labels are the pod's labels. The map is the caller's own copy.
	Labels map[string]string
	// Node is the node the pod is scheduled on (spec.nodeName).
	Node string
	// Annotations are the pod's resource.opentelemetry.io/<key> annotations (no others are
	// kept). The map is the caller's own copy.
	Annotations map[string]string
	// OwnerKind and OwnerName are the pod's controller owner reference (ReplicaSet,
	// StatefulSet, DaemonSet, Job, Node for a static pod's mirror...); "" for none.
	OwnerKind, OwnerName string
}

// ImageVersion is service.version as OpenTelemetry's Kubernetes conventions derive it from a
// container image reference when no annotation or label gives it: "<tag>@<digest>", else the
// digest, else the tag; "" when the reference has neither.
func ImageVersion(image string) string {
	name, digest, _ := strings.Cut(image, "@")
	tag := ""
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		tag = name[i+1:]
	}
	switch {
	case tag != "" && digest != "":
		return tag + "@" + digest
	case digest != "":
		return digest
	}
	return tag
}

// ResourceAnnotationPrefix starts the pod annotations that set OpenTelemetry resource
// attributes (resource.opentelemetry.io/service.name and so on).
const ResourceAnnotationPrefix = "resource.opentelemetry.io/"

// Workload returns the pod's owner workload as OpenTelemetry names it: a ReplicaSet owned by a
// Deployment is recognised by the Deployment convention that the ReplicaSet is named
// <deployment>-<pod-template-hash> and the pod carries the pod-template-hash label, so no
// read of ReplicaSets (no RBAC beyond pods) is needed. kind is Deployment, ReplicaSet,
// StatefulSet, DaemonSet or Job; "" when the pod has no such owner (static pods, bare pods).
func (p PodInfo) Workload() (kind, name, replicaSet string) {
	switch p.OwnerKind {
	case "ReplicaSet":
		if h := p.Labels["pod-template-hash"]; h != "" {
			if d, ok := strings.CutSuffix(p.OwnerName, "-"+h); ok && d != "" {
				return "Deployment", d, p.OwnerName
			}
		}
		return "ReplicaSet", p.OwnerName, p.OwnerName
	case "StatefulSet", "DaemonSet", "Job":
		return p.OwnerKind, p.OwnerName, ""
	}
	return "", "", ""
}

// ServiceName is service.name as OpenTelemetry's Kubernetes conventions derive it, in order:
// the resource.opentelemetry.io/service.name annotation, the app.kubernetes.io/instance
// label, the app.kubernetes.io/name label, the owner workload's name, then the container's
// name. The pod's own name is skipped: for the pods that have no owner (static pods such as
// kube-controller-manager, bare pods) it carries the node's name or a random suffix, while the
// container's name is the same on every node.
func (p PodInfo) ServiceName(container string) string {
	if v := p.Annotations[ResourceAnnotationPrefix+"service.name"]; v != "" {
		return v
	}
	for _, l := range []string{"app.kubernetes.io/instance", "app.kubernetes.io/name"} {
		if v := p.Labels[l]; v != "" {
			return v
		}
	}
	if _, name, _ := p.Workload(); name != "" {
		return name
	}
	return container
}

// PodClient lists and watches the pods of every namespace: the agent's is package kubeapi's
// Client. A client that implements IsWatchListSemanticsUnSupported() bool (client-go's
// fake clientset does) tells the informer whether it may stream its lists as watches.
type PodClient interface {
	ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	WatchPods(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// PodIndexOptions configures a [PodIndex].
type PodIndexOptions struct {
	// Client reaches the API server. It needs get, list and watch on pods, nothing else. Nil
	// means there is no API access (say, not running in a cluster): the index stays empty and
	// reports so once, and the agent works with host-only metadata.
	Client PodClient
	// NodeName is the node whose pods are indexed (field selector spec.nodeName=NodeName):
	// the agent's own node, from the downward API (env NODE_NAME from spec.nodeName).
	// Required when Client is set.
	NodeName string
	// Logger receives the index's state changes. Nil means slog.Default().
	Logger *slog.Logger
}

// ErrNoNodeName is returned by [NewPodIndex] when a client is given but no node name: without
// it the index would watch every pod of the cluster.
var ErrNoNodeName = errors.New("no node name: set NODE_NAME from the downward API (fieldRef spec.nodeName)")

// Indexer names of the informer's store.
const (
	byContainerID = "containerID"
	byPodUID      = "podUID"
)

// PodIndex is the stage that maps container IDs to pods, for the pods of one node. It keeps a
// client-go shared informer on those pods (list and watch with the field selector
// spec.nodeName=<node>, stripped to the fields it needs), indexed by the container IDs of
// status.containerStatuses, initContainerStatuses and ephemeralContainerStatuses.
//
// When the API server cannot be reached or refuses (no client, forbidden, down), PodIndex
// logs it once, keeps retrying with the informer's backoff, and logs once more when the API
// answers again. Lookups meanwhile return what is cached: nothing before the first sync.
type PodIndex struct {
	opts     PodIndexOptions
	log      *slog.Logger
	informer cache.SharedIndexInformer // nil without a client

	mu        sync.Mutex
	degraded  bool
	recovered time.Time // when the API server last answered again after failing
	now       func() time.Time
}

// resyncSettle is how long after the API server answers again the index is still taken not to
// know every pod of its node: the list that answered is stored a moment after it returned, and
// a pod that started during the outage is in it.
const resyncSettle = 5 * time.Second

// NewPodIndex returns a PodIndex. Start it with Run.
func NewPodIndex(opts PodIndexOptions) (*PodIndex, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	x := &PodIndex{opts: opts, log: opts.Logger, now: time.Now}
	if opts.Client == nil {
		return x, nil
	}
	if opts.NodeName == "" {
		return nil, ErrNoNodeName
	}
	selector := fields.OneTermEqualSelector("spec.nodeName", opts.NodeName).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			l, err := opts.Client.ListPods(ctx, o)
			x.report(ctx, err)
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			w, err := opts.Client.WatchPods(ctx, o)
			x.report(ctx, err)
			return w, err
		},
	}
	x.informer = cache.NewSharedIndexInformerWithOptions(
		cache.ToListWatcherWithWatchListSemantics(lw, opts.Client),
		&corev1.Pod{},
		cache.SharedIndexInformerOptions{
			Indexers:          cache.Indexers{byContainerID: indexContainerIDs, byPodUID: indexPodUID},
			ObjectDescription: "pods on node " + opts.NodeName,
		},
	)
	if err := x.informer.SetTransform(slimPod); err != nil {
		return nil, fmt.Errorf("set pod transform: %w", err)
	}
	// report has said it once; the default handler would repeat it through klog at every retry.
	if err := x.informer.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		x.log.Debug("pod informer: list and watch ended; retrying", "err", err)
	}); err != nil {
		return nil, fmt.Errorf("set pod watch error handler: %w", err)
	}
	return x, nil
}

// Run keeps the index up to date until ctx ends, then returns nil.
func (x *PodIndex) Run(ctx context.Context) error {
	if x.informer == nil {
		x.log.Warn("kubernetes metadata unavailable: no API client (not running in a cluster?); spans carry host metadata only")
		<-ctx.Done()
		return nil
	}
	x.informer.RunWithContext(ctx)
	return nil
}

// Synced reports whether the index has listed the node's pods at least once. A PodIndex that
// lost the API server after that stays synced and serves what it has.
func (x *PodIndex) Synced() bool {
	return x.informer != nil && x.informer.HasSynced()
}

// WaitSynced waits until the index is synced or ctx ends, and reports whether it is synced.
// Use it to give the first scan of processes a chance at pod metadata.
func (x *PodIndex) WaitSynced(ctx context.Context) bool {
	if x.informer == nil {
		return false
	}
	return cache.WaitForCacheSync(ctx.Done(), x.informer.HasSynced)
}

// Lookup returns the pod and container whose container ID is containerID (64 hex digits, with
// or without a "<runtime>://" prefix). It finds nothing before the kubelet has written the ID
// into the pod's status, which can be a moment after the container's first process started;
// [PodIndex.LookupPod] by the pod UID from the cgroup path covers that moment.
func (x *PodIndex) Lookup(containerID string) (PodInfo, bool) {
	containerID = stripRuntime(containerID)
	pod, ok := x.podBy(byContainerID, containerID)
	if !ok {
		return PodInfo{}, false
	}
	info := podInfo(pod)
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, s := range statuses {
			if stripRuntime(s.ContainerID) == containerID {
				info.Container = s.Name
				for _, c := range slices.Concat(pod.Spec.Containers, pod.Spec.InitContainers) {
					if c.Name == s.Name {
						info.Image = c.Image
					}
				}
				return info, true
			}
		}
	}
	return info, true
}

// podBy returns the pod the informer's index names under key, if any.
func (x *PodIndex) podBy(index, key string) (*corev1.Pod, bool) {
	if x.informer == nil || key == "" {
		return nil, false
	}
	objs, err := x.informer.GetIndexer().ByIndex(index, key)
	if err != nil || len(objs) == 0 {
		return nil, false
	}
	pod, ok := objs[0].(*corev1.Pod)
	return pod, ok
}

// LookupPod returns the pod whose UID is uid. Container is the name of the pod's only
// container when it has one and no init or ephemeral containers (then any process in the pod
// runs in it, known before the kubelet reports the container's ID: a restarted controller's
// first reconciles are named), else "".
func (x *PodIndex) LookupPod(uid string) (PodInfo, bool) {
	pod, ok := x.podBy(byPodUID, uid)
	if !ok {
		return PodInfo{}, false
	}
	info := podInfo(pod)
	if len(pod.Spec.Containers) == 1 && len(pod.Spec.InitContainers) == 0 && len(pod.Spec.EphemeralContainers) == 0 {
		info.Container, info.Image = pod.Spec.Containers[0].Name, pod.Spec.Containers[0].Image
	}
	return info, true
}

// OtherNode reports whether a process in container c runs in a pod this index does not hold:
// c names a pod (its cgroup path has a pod UID), the index has listed this node's pods, and it
// knows neither c's container ID nor its pod UID (nor, for a static pod, the kubelet's UID of
// it). On a node of its own that is a pod the index has not heard of yet (it learns of a pod
// from the same watch as the kubelet, before its containers start); where several nodes share
// one kernel and one PID namespace (kind-like clusters, the test bed's two nodes) it is a pod of
// another node, whose agent traces it. OtherNode is false for a process outside Kubernetes,
// while the index has not synced (no API access: every process is this node's), and while the
// API server is unreachable and for resyncSettle after it answers again: a pod that started
// meanwhile is not in the index, and is far more likely this node's than another's (its
// process is traced with host metadata, and named or let go once the index has listed again).
func (x *PodIndex) OtherNode(c Container) bool {
	if c.PodUID == "" || !x.Synced() || x.Unreachable() {
		return false
	}
	if _, ok := x.podBy(byContainerID, c.ID); ok {
		return false
	}
	_, ok := x.podBy(byPodUID, c.PodUID)
	return !ok
}

// Unreachable reports whether the index cannot tell what pods its node has now: a list or watch
// of pods failed and none has succeeded since, or one did less than resyncSettle ago.
func (x *PodIndex) Unreachable() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.degraded || (!x.recovered.IsZero() && x.now().Sub(x.recovered) < resyncSettle)
}

// report records the outcome of one list or watch call: the first failure after success is
// logged as a warning, the first success after failure as info; the rest at debug level.
func (x *PodIndex) report(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // shutting down
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	switch {
	case err != nil && !x.degraded:
		x.degraded = true
		x.log.Warn("kubernetes metadata unavailable: cannot list or watch pods; spans carry host metadata only until it works again (retrying with backoff); the agent needs get, list and watch on pods",
			"node", x.opts.NodeName, "err", err)
	case err != nil:
		x.log.Debug("list or watch pods", "err", err)
	case x.degraded:
		x.degraded = false
		x.recovered = x.now()
		x.log.Info("kubernetes metadata available again", "node", x.opts.NodeName)
	}
}

func podInfo(pod *corev1.Pod) PodInfo {
	info := PodInfo{
		Namespace:   pod.Namespace,
		Name:        pod.Name,
		UID:         string(pod.UID),
		Labels:      maps.Clone(pod.Labels),
		Node:        pod.Spec.NodeName,
		Annotations: resourceAnnotations(pod.Annotations),
	}
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		info.OwnerKind, info.OwnerName = ref.Kind, ref.Name
	}
	return info
}

// resourceAnnotations keeps the resource.opentelemetry.io/ annotations of a; nil if none.
func resourceAnnotations(a map[string]string) map[string]string {
	var out map[string]string
	for k, v := range a {
		if strings.HasPrefix(k, ResourceAnnotationPrefix) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// slimAnnotations keeps the annotations the index reads: the resource.opentelemetry.io/ ones
// and a mirror pod's kubernetes.io/config.mirror.
func slimAnnotations(a map[string]string) map[string]string {
	out := resourceAnnotations(a)
	if m, ok := a[corev1.MirrorPodAnnotationKey]; ok {
		if out == nil {
			out = map[string]string{}
		}
		out[corev1.MirrorPodAnnotationKey] = m
	}
	return out
}

// stripRuntime removes the "<runtime>://" prefix of a container ID in pod status.
func stripRuntime(id string) string {
	if _, after, ok := strings.Cut(id, "://"); ok {
		return after
	}
	return id
}

func indexContainerIDs(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	var ids []string
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, s := range statuses {
			if id := stripRuntime(s.ContainerID); id != "" {
				ids = append(ids, id)
			}
		}
	}
	return ids, nil
}

// indexPodUID indexes a pod by its UID and, for a static pod's mirror, by the kubelet's UID of
// the static pod (annotation kubernetes.io/config.mirror): the one its cgroup path names.
func indexPodUID(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.UID == "" {
		return nil, nil
	}
	uids := []string{string(pod.UID)}
	if m := pod.Annotations[corev1.MirrorPodAnnotationKey]; m != "" && m != string(pod.UID) {
		uids = append(uids, m)
	}
	return uids, nil
}

// slimPod keeps only what the index needs of a pod, so the cache of a busy node stays small:
// identity, labels, the resource.opentelemetry.io/ annotations and a mirror pod's
// kubernetes.io/config.mirror, the controller owner reference, node, and the name and ID of
// each container status. It is idempotent.
// containerNames keeps the names of cs, the one field of a container spec the index reads.
func containerNames(cs []corev1.Container) []corev1.Container {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: c.Name, Image: c.Image}
	}
	return out
}

func ephemeralNames(cs []corev1.EphemeralContainer) []corev1.EphemeralContainer {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.EphemeralContainer, len(cs))
	for i, c := range cs {
		out[i] = corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: c.Name}}
	}
	return out
}

func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := func(in []corev1.ContainerStatus) []corev1.ContainerStatus {
		if len(in) == 0 {
			return nil
		}
		out := make([]corev1.ContainerStatus, len(in))
		for i, s := range in {
			out[i] = corev1.ContainerStatus{Name: s.Name, ContainerID: s.ContainerID}
		}
		return out
	}
	var owners []metav1.OwnerReference
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		owners = []metav1.OwnerReference{{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID, Controller: ref.Controller}}
	}
	return &corev1.Pod{
		TypeMeta: pod.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:              pod.Name,
			Namespace:         pod.Namespace,
			UID:               pod.UID,
			ResourceVersion:   pod.ResourceVersion,
			Labels:            pod.Labels,
			Annotations:       slimAnnotations(pod.Annotations),
			OwnerReferences:   owners,
			DeletionTimestamp: pod.DeletionTimestamp,
		},
		Spec: corev1.PodSpec{
			NodeName:            pod.Spec.NodeName,
			Containers:          containerNames(pod.Spec.Containers),
			InitContainers:      containerNames(pod.Spec.InitContainers),
			EphemeralContainers: ephemeralNames(pod.Spec.EphemeralContainers),
		},
		Status: corev1.PodStatus{
			ContainerStatuses:          slim(pod.Status.ContainerStatuses),
			InitContainerStatuses:      slim(pod.Status.InitContainerStatuses),
			EphemeralContainerStatuses: slim(pod.Status.EphemeralContainerStatuses),
		},
	}, nil
}
