package testing

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// DefaultNamespace is the namespace config/default installs the webhook in.
const DefaultNamespace = "sandbox-fence-system"

// Install is where a rendering of the bundle was asked to put the webhook.
type Install struct {
	Namespace string
	Image     string
	// CertManager: the rendering is of the cert-manager overlay (a
	// Certificate and cainjector's annotation) instead of cert-controller.
	CertManager bool
}

// InstallReferences lists every reference in a rendered bundle that did not
// follow in.Namespace and in.Image: the objects' namespaces, the Service the
// webhook configuration calls, the strings that embed the namespace (the
// webhook's ServiceAccount in its matchConditions, the egress policy and the
// FenceConfig schema; its namespaceSelector exclusion; the Certificate's
// dnsNames and cainjector's inject-ca-from), the RBAC subjects and the
// FlowSchema's ServiceAccount subject, the names
// the binary is given for its caBundle and Secret, and the image. Any other
// mention of the default namespace is reported too, so a reference added
// later without following fails here. Empty when everything followed.
func InstallReferences(objs []*unstructured.Unstructured, in Install) []string {
	objs = normalize(objs)
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	ns := in.Namespace
	sa := "system:serviceaccount:" + ns + ":sandbox-fence-webhook"
	get := func(kind, name string) *unstructured.Unstructured {
		for _, o := range objs {
			if o.GetKind() == kind && o.GetName() == name {
				return o
			}
		}
		fail("%s %s: not rendered", kind, name)
		return nil
	}

	if get("Namespace", ns) == nil {
		return bad
	}
	clusterScoped := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			if scope, _, _ := unstructured.NestedString(o.Object, "spec", "scope"); scope == "Cluster" {
				kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
				clusterScoped[kind] = true
			}
		}
	}
	for _, o := range objs {
		if clusterScoped[o.GetKind()] && o.GetNamespace() != "" {
			fail("%s %s: cluster-scoped, yet rendered in namespace %q", o.GetKind(), o.GetName(), o.GetNamespace())
		}
		if o.GetNamespace() != "" && o.GetNamespace() != ns {
			fail("%s %s: in namespace %q, want %q", o.GetKind(), o.GetName(), o.GetNamespace(), ns)
		}
		if o.GetKind() == "Namespace" && o.GetName() != ns {
			fail("Namespace %s rendered besides %s", o.GetName(), ns)
		}
		// RBAC subjects: the webhook's ServiceAccount in its namespace.
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		for _, s := range subjects {
			m, _ := s.(map[string]any)
			if m["kind"] == "ServiceAccount" && m["namespace"] != ns {
				fail("%s %s: subject ServiceAccount %v in namespace %v, want %q", o.GetKind(), o.GetName(), m["name"], m["namespace"], ns)
			}
		}
	}
	// The FlowSchema that keeps the webhook's requests out of its hosts'
	// priority level: a subject left in another namespace matches nobody,
	// and the requests fall back to the hosts' level (docs/webhook.md).
	if fs := get("FlowSchema", "sandbox-fence-webhook"); fs != nil {
		matched := false
		rules, _, _ := unstructured.NestedSlice(fs.Object, "spec", "rules")
		for _, r := range rules {
			rm, _ := r.(map[string]any)
			subjects, _, _ := unstructured.NestedSlice(rm, "subjects")
			for _, s := range subjects {
				sm, _ := s.(map[string]any)
				if sm["kind"] != "ServiceAccount" {
					continue
				}
				name, _, _ := unstructured.NestedString(sm, "serviceAccount", "name")
				sns, _, _ := unstructured.NestedString(sm, "serviceAccount", "namespace")
				if name != "sandbox-fence-webhook" || sns != ns {
					fail("FlowSchema sandbox-fence-webhook: subject ServiceAccount %s/%s, want %s/sandbox-fence-webhook", sns, name, ns)
					continue
				}
				matched = true
			}
		}
		if !matched {
			fail("FlowSchema sandbox-fence-webhook: no subject ServiceAccount %s/sandbox-fence-webhook", ns)
		}
	}
	if svc := get("Service", "sandbox-fence-webhook"); svc != nil && svc.GetNamespace() != ns {
		fail("Service sandbox-fence-webhook in %q", svc.GetNamespace())
	}

	// The webhook configuration: where it calls, and (cert-manager) where
	// its CA comes from.
	if vwc := get("ValidatingWebhookConfiguration", "sandbox-fence-webhook"); vwc != nil {
		hooks, _, _ := unstructured.NestedSlice(vwc.Object, "webhooks")
		if len(hooks) == 0 {
			fail("ValidatingWebhookConfiguration sandbox-fence-webhook: no webhooks")
		}
		for _, h := range hooks {
			hm, _ := h.(map[string]any)
			name := hm["name"]
			svcNS, _, _ := unstructured.NestedString(hm, "clientConfig", "service", "namespace")
			svcName, _, _ := unstructured.NestedString(hm, "clientConfig", "service", "name")
			if svcNS != ns || svcName != "sandbox-fence-webhook" {
				fail("webhook %v: calls Service %s/%s, want %s/sandbox-fence-webhook", name, svcNS, svcName, ns)
			}
		}
		inject := vwc.GetAnnotations()["cert-manager.io/inject-ca-from"]
		switch {
		case in.CertManager && inject != ns+"/sandbox-fence-webhook":
			fail("ValidatingWebhookConfiguration: cert-manager.io/inject-ca-from is %q, want %s/sandbox-fence-webhook", inject, ns)
		case !in.CertManager && inject != "":
			fail("ValidatingWebhookConfiguration: cert-manager.io/inject-ca-from %q without cert-manager", inject)
		}
	}
	if in.CertManager {
		if c := get("Certificate", "sandbox-fence-webhook"); c != nil {
			dns, _, _ := unstructured.NestedStringSlice(c.Object, "spec", "dnsNames")
			want := []string{"sandbox-fence-webhook." + ns + ".svc", "sandbox-fence-webhook." + ns + ".svc.cluster.local"}
			if !slices.Equal(dns, want) {
				fail("Certificate sandbox-fence-webhook: dnsNames %v, want %v", dns, want)
			}
		}
	}

	// The binary: its image, and the names it fills the caBundle of and
	// keeps its certificate in; their namespace is its own (POD_NAMESPACE).
	if d := get("Deployment", "sandbox-fence-webhook"); d != nil {
		var dep struct {
			Spec struct {
				Template struct {
					Spec struct {
						ServiceAccountName string `json:"serviceAccountName"`
						Containers         []struct {
							Image string   `json:"image"`
							Args  []string `json:"args"`
							Env   []struct {
								Name      string `json:"name"`
								ValueFrom *struct {
									FieldRef *struct {
										FieldPath string `json:"fieldPath"`
									} `json:"fieldRef"`
								} `json:"valueFrom"`
							} `json:"env"`
						} `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		b, _ := yaml.Marshal(d.Object)
		if err := yaml.Unmarshal(b, &dep); err != nil || len(dep.Spec.Template.Spec.Containers) != 1 {
			fail("Deployment sandbox-fence-webhook: not one container (%v)", err)
			return bad
		}
		c := dep.Spec.Template.Spec.Containers[0]
		if c.Image != in.Image {
			fail("Deployment sandbox-fence-webhook: image %q, want %q", c.Image, in.Image)
		}
		if dep.Spec.Template.Spec.ServiceAccountName != "sandbox-fence-webhook" {
			fail("Deployment sandbox-fence-webhook: serviceAccountName %q", dep.Spec.Template.Spec.ServiceAccountName)
		}
		fromPod := false
		for _, e := range c.Env {
			fromPod = fromPod || (e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace")
		}
		if !fromPod {
			fail("Deployment sandbox-fence-webhook: POD_NAMESPACE is not the pod's own namespace")
		}
		for _, a := range c.Args {
			if strings.HasPrefix(a, "--namespace=") {
				fail("Deployment sandbox-fence-webhook: %s pins the namespace", a)
			}
			if v, ok := strings.CutPrefix(a, "--webhook-config-name="); ok {
				get("ValidatingWebhookConfiguration", v)
			}
			if v, ok := strings.CutPrefix(a, "--service-name="); ok {
				get("Service", v)
			}
			if v, ok := strings.CutPrefix(a, "--cert-secret-name="); ok && !in.CertManager {
				get("Secret", v)
			}
		}
	}

	// The FenceConfig schema names the webhook's ServiceAccount, which can
	// never be a bound host.
	if crd := get("CustomResourceDefinition", "fenceconfigs.fence.sandbox.namzu.ai"); crd != nil {
		b, _ := yaml.Marshal(crd.Object)
		if !strings.Contains(string(b), "self != '"+sa+"'") {
			fail("CustomResourceDefinition fenceconfigs: no rule refusing %s as a host", sa)
		}
	}

	// Nothing else may still name the default namespace.
	if ns != DefaultNamespace {
		for _, o := range objs {
			b, _ := yaml.Marshal(o.Object)
			for i, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, DefaultNamespace) {
					fail("%s %s: line %d still names %s: %s", o.GetKind(), o.GetName(), i+1, DefaultNamespace, strings.TrimSpace(line))
				}
			}
		}
	}
	return bad
}

// normalize round-trips objects through JSON: kustomize's maps hold Go ints,
// which unstructured's accessors refuse.
func normalize(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		b, err := json.Marshal(o.Object)
		if err != nil {
			panic(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			panic(err)
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out
}
