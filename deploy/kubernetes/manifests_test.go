package kubernetes

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// manifests are the decoded documents of every *.yaml here but the
// kustomization, by kind.
type manifests struct {
	files        []string
	configMaps   []*corev1.ConfigMap
	services     []*corev1.Service
	statefulSets []*appsv1.StatefulSet
	pdbs         []*policyv1.PodDisruptionBudget
}

// load decodes every document strictly (sigs.k8s.io/yaml.UnmarshalStrict:
// an unknown or misspelt field, a duplicate key or a value of the wrong
// type is an error) into the k8s.io/api type its apiVersion and kind name.
// A kind the test does not know is an error too.
func load(t *testing.T) manifests {
	t.Helper()
	paths, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m manifests
	for _, path := range paths {
		if path == "kustomization.yaml" {
			continue
		}
		m.files = append(m.files, path)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitDocuments(b) {
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s document %d: %v", path, i+1, err)
			}
			where := fmt.Sprintf("%s document %d (%s %s)", path, i+1, tm.APIVersion, tm.Kind)
			var obj any
			switch tm.APIVersion + " " + tm.Kind {
			case "v1 ConfigMap":
				o := &corev1.ConfigMap{}
				m.configMaps, obj = append(m.configMaps, o), o
			case "v1 Service":
				o := &corev1.Service{}
				m.services, obj = append(m.services, o), o
			case "apps/v1 StatefulSet":
				o := &appsv1.StatefulSet{}
				m.statefulSets, obj = append(m.statefulSets, o), o
			case "policy/v1 PodDisruptionBudget":
				o := &policyv1.PodDisruptionBudget{}
				m.pdbs, obj = append(m.pdbs, o), o
			default:
				t.Fatalf("%s: a kind this test does not validate", where)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			meta := obj.(metav1.Object)
			if errs := validation.IsDNS1123Label(meta.GetName()); len(errs) > 0 {
				t.Errorf("%s: name %q: %v", where, meta.GetName(), errs)
			}
			if meta.GetNamespace() != "" {
				t.Errorf("%s: sets namespace %q (kubectl apply -n chooses it)", where, meta.GetNamespace())
			}
		}
	}
	return m
}

// splitDocuments splits a YAML stream at its --- lines, dropping empty
// documents (comments only).
func splitDocuments(b []byte) [][]byte {
	var out [][]byte
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		empty := true
		for _, l := range strings.Split(doc, "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				empty = false
			}
		}
		if !empty {
			out = append(out, []byte(doc))
		}
	}
	return out
}

func one[T any](t *testing.T, what string, xs []T) T {
	t.Helper()
	if len(xs) != 1 {
		t.Fatalf("%d %s, want 1", len(xs), what)
	}
	return xs[0]
}

// selects fails unless sel is a valid selector that matches the labels.
func selects(t *testing.T, what string, sel *metav1.LabelSelector, l map[string]string) {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || s.Empty() || !s.Matches(labels.Set(l)) {
		t.Errorf("%s: selector %v (%v) does not select the pods' labels %v", what, sel, err, l)
	}
}

func selectsMap(t *testing.T, what string, sel, l map[string]string) {
	t.Helper()
	selects(t, what, &metav1.LabelSelector{MatchLabels: sel}, l)
}

// coorddFlags are the flag names cmd/coordd defines, read from its source
// (this module cannot import the main module's command).
func coorddFlags(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("../../cmd/coordd/*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)(?:f\.\w+\(&[^,]+|fs\.\w+\([^,]+|\{&o\.[\w.]+), "([a-z0-9-]+)"`).FindAllSubmatch(b, -1) {
			out[string(m[1])] = true
		}
	}
	if !out["data-dir"] || !out["peers"] || !out["tls-ca"] || !out["http-addr"] {
		t.Fatalf("read %d flags from cmd/coordd, not data-dir, peers, tls-ca and http-addr: the pattern is stale", len(out))
	}
	return out
}

// Every manifest decodes strictly into its Kubernetes type, and together
// they make a three-node coordd cluster: stable identities under a
// headless service, probes on the declared HTTP port (/livez for liveness
// and startup, /readyz for readiness), a PodDisruptionBudget of one over
// the same pods, a configuration whose peers are the StatefulSet's stable
// DNS names and whose keys are coordd flags, the hardening and resources.
func TestManifests(t *testing.T) {
	m := load(t)
	sts := one(t, "StatefulSets", m.statefulSets)
	cm := one(t, "ConfigMaps", m.configMaps)
	pdb := one(t, "PodDisruptionBudgets", m.pdbs)
	pod := sts.Spec.Template
	podLabels := pod.Labels

	// The StatefulSet.
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", sts.Spec.Replicas)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q: want Parallel (no pod is ready before a majority runs)", sts.Spec.PodManagementPolicy)
	}
	selects(t, "StatefulSet", sts.Spec.Selector, podLabels)
	c := one(t, "containers", pod.Spec.Containers)
	ports := map[string]int32{}
	for _, p := range c.Ports {
		if errs := validation.IsValidPortName(p.Name); len(errs) > 0 {
			t.Errorf("port %q: %v", p.Name, errs)
		}
		ports[p.Name] = p.ContainerPort
	}
	for name, want := range map[string]int32{"grpc": 7400, "http": 7401, "raft": 7402} {
		if ports[name] != want {
			t.Errorf("container port %s = %d, want %d", name, ports[name], want)
		}
	}

	// The configuration: a coordd.yaml whose keys are flags.
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["coordd.yaml"]), &cfg); err != nil || cfg == nil {
		t.Fatalf("ConfigMap %s: coordd.yaml: %v", cm.Name, err)
	}
	flags := coorddFlags(t)
	for k := range cfg {
		if !flags[k] {
			t.Errorf("coordd.yaml: %q is not a coordd flag", k)
		}
	}
	tlsOn := cfg["tls-ca"] != nil

	// Probes: liveness and startup on /livez, readiness on /readyz, all on
	// the declared http port, which is the port of --http-addr; HTTPS when
	// coordd serves TLS.
	_, httpPort, err := net.SplitHostPort(fmt.Sprint(cfg["http-addr"]))
	if err != nil {
		t.Fatalf("coordd.yaml http-addr %v: %v", cfg["http-addr"], err)
	}
	for name, pr := range map[string]struct {
		p    *corev1.Probe
		path string
	}{"startupProbe": {c.StartupProbe, "/livez"}, "livenessProbe": {c.LivenessProbe, "/livez"}, "readinessProbe": {c.ReadinessProbe, "/readyz"}} {
		if pr.p == nil || pr.p.HTTPGet == nil {
			t.Errorf("%s: want an httpGet probe", name)
			continue
		}
		g := pr.p.HTTPGet
		port := g.Port.IntVal
		if g.Port.StrVal != "" {
			port = ports[g.Port.StrVal]
		}
		if g.Path != pr.path || strconv.Itoa(int(port)) != httpPort {
			t.Errorf("%s: %s on port %v (%d), want %s on the http port %s", name, g.Path, g.Port.String(), port, pr.path, httpPort)
		}
		if want := map[bool]corev1.URIScheme{true: corev1.URISchemeHTTPS, false: corev1.URISchemeHTTP}[tlsOn]; g.Scheme != want {
			t.Errorf("%s: scheme %q, want %q", name, g.Scheme, want)
		}
	}

	// Stable identities: --id is the pod's name, the peers are the pods by
	// their DNS names under the governing (headless) service, on the raft
	// port.
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if e := env["POD_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("POD_NAME: want the downward API's metadata.name")
	}
	if env["COORDD_ID"].Value != "$(POD_NAME)" {
		t.Errorf("COORDD_ID=%q, want $(POD_NAME)", env["COORDD_ID"].Value)
	}
	var want []string
	for i := range int(*sts.Spec.Replicas) {
		p := fmt.Sprintf("%s-%d", sts.Name, i)
		want = append(want, fmt.Sprintf("%s=%s.%s:%d", p, p, sts.Spec.ServiceName, ports["raft"]))
	}
	if got := strings.Split(fmt.Sprint(cfg["peers"]), ","); !slices.Equal(got, want) {
		t.Errorf("coordd.yaml peers %v, want %v", got, want)
	}
	for _, name := range []string{"COORDD_RAFT_ADDR", "COORDD_GRPC_ADDR"} {
		if _, port, err := net.SplitHostPort(env[name].Value); err != nil || port != strconv.Itoa(int(ports[map[string]string{"COORDD_RAFT_ADDR": "raft", "COORDD_GRPC_ADDR": "grpc"}[name]])) {
			t.Errorf("%s=%q: want the container port", name, env[name].Value)
		}
	}

	// Services: the governing one headless, publishing pods before they
	// are ready (they must reach each other to elect a leader), with the
	// raft port; the client one a ClusterIP. Both select the pods.
	var headless, client *corev1.Service
	for _, s := range m.services {
		selectsMap(t, "Service "+s.Name, s.Spec.Selector, podLabels)
		for _, p := range s.Spec.Ports {
			if p.TargetPort.StrVal == "" || ports[p.TargetPort.StrVal] == 0 || ports[p.TargetPort.StrVal] != p.Port {
				t.Errorf("Service %s port %s: targetPort %v is not the container port %d", s.Name, p.Name, p.TargetPort.String(), p.Port)
			}
		}
		if s.Name == sts.Spec.ServiceName {
			headless = s
		} else {
			client = s
		}
	}
	if headless == nil || client == nil || len(m.services) != 2 {
		t.Fatalf("want the governing service %q and one client service, have %d services", sts.Spec.ServiceName, len(m.services))
	}
	if headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: clusterIP %q, publishNotReadyAddresses %v: want None and true", headless.Name, headless.Spec.ClusterIP, headless.Spec.PublishNotReadyAddresses)
	}
	if client.Spec.ClusterIP == corev1.ClusterIPNone || client.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: want a ClusterIP service of ready pods only", client.Name)
	}
	hasPort := func(s *corev1.Service, name string) bool {
		return slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == name })
	}
	if !hasPort(headless, "raft") || !hasPort(client, "grpc") || hasPort(client, "raft") {
		t.Errorf("want raft on %s, grpc and no raft on %s", headless.Name, client.Name)
	}

	// The PodDisruptionBudget: one pod away at most, over these pods.
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("PodDisruptionBudget: maxUnavailable %v, minAvailable %v: want maxUnavailable 1", pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable)
	}
	selects(t, "PodDisruptionBudget", pdb.Spec.Selector, podLabels)

	// Storage: the claim template mounted at the data dir.
	mounts := map[string]corev1.VolumeMount{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.Name] = vm
	}
	vct := one(t, "volumeClaimTemplates", sts.Spec.VolumeClaimTemplates)
	if mounts[vct.Name].MountPath != cfg["data-dir"] || vct.Spec.Resources.Requests.Storage().IsZero() {
		t.Errorf("volume claim %s: mounted at %q, data-dir %v, storage %v", vct.Name, mounts[vct.Name].MountPath, cfg["data-dir"], vct.Spec.Resources.Requests.Storage())
	}
	// The config and TLS volumes: the ConfigMap at --config's path, the
	// secret holding the CA and each pod's certificate.
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v
	}
	if i := slices.Index(c.Args, "--config"); i < 0 || i+1 >= len(c.Args) {
		t.Errorf("args %v: want --config FILE", c.Args)
	} else if cv := vols[mounts["config"].Name]; cv.ConfigMap == nil || cv.ConfigMap.Name != cm.Name || filepath.Join(mounts["config"].MountPath) != c.Args[i+1] {
		t.Errorf("--config %s: want the ConfigMap %s mounted there", c.Args[i+1], cm.Name)
	}
	if tlsOn {
		tv, tm := vols["tls"], mounts["tls"]
		if tv.Secret == nil || tv.Secret.SecretName == "" || !tm.ReadOnly {
			t.Errorf("tls volume %+v mounted %+v: want a secret, read-only", tv, tm)
		}
		for _, p := range []string{fmt.Sprint(cfg["tls-ca"]), env["COORDD_TLS_CERT"].Value, env["COORDD_TLS_KEY"].Value} {
			if !strings.HasPrefix(p, tm.MountPath+"/") {
				t.Errorf("TLS file %q is not in the secret's mount %s", p, tm.MountPath)
			}
		}
	}

	// Hardening and resources.
	psc, sc := pod.Spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 || psc.FSGroup == nil {
		t.Errorf("pod securityContext %+v: want runAsNonRoot, a non-zero runAsUser and an fsGroup (the volume's owner)", psc)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("container securityContext %+v: want readOnlyRootFilesystem, no privilege escalation, drop ALL", sc)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
		if req.IsZero() || lim.IsZero() || req.Cmp(lim) > 0 {
			t.Errorf("resources %s: request %v, limit %v", r, req.String(), lim.String())
		}
	}
	aff := pod.Spec.Affinity
	if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 {
		t.Errorf("want a required pod anti-affinity: one voter per Kubernetes node")
	} else {
		term := aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
		selects(t, "pod anti-affinity", term.LabelSelector, podLabels)
	}

	// The image's ports (deploy/container/Dockerfile's EXPOSE) are the
	// container's.
	df, err := os.ReadFile("../container/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	expose := regexp.MustCompile(`(?m)^EXPOSE (.*)$`).FindSubmatch(df)
	for name, p := range ports {
		if expose == nil || !slices.Contains(strings.Fields(string(expose[1])), strconv.Itoa(int(p))) {
			t.Errorf("container port %s %d is not EXPOSEd by the Dockerfile", name, p)
		}
	}
}

// The kustomization lists exactly the manifests here.
func TestKustomization(t *testing.T) {
	b, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatal(err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization: %s %s", k.APIVersion, k.Kind)
	}
	files := load(t).files
	slices.Sort(files)
	res := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(res, files) {
		t.Errorf("kustomization resources %v, manifests %v", res, files)
	}
}

// The strict decoding catches a misspelt field: the check can fail.
func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	b, err := os.ReadFile("pdb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(b, []byte("maxUnavailable:"), []byte("maxUnavailble:"), 1)
	if err := yaml.UnmarshalStrict(bad, &policyv1.PodDisruptionBudget{}); err == nil || !strings.Contains(err.Error(), "maxUnavailble") {
		t.Fatalf("a misspelt field decoded: %v", err)
	}
}
