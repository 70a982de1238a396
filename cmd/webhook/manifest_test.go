package main

import (
	"flag"
	"io"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/sandbox-fence/sandbox-fence/internal/enforcement"
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
)

const configDir = "../../config"

// deployed is what the shipped Deployment runs, in the terms the flags and
// the restricted Pod Security Standard care about.
type deployed struct {
	Replicas                                  int32
	Image                                     string
	PullPolicy                                corev1.PullPolicy
	CertRotation                              bool
	CertDirMounted, CertSecret                string
	CertDirInMemory                           bool
	RunAsNonRoot, NoPrivilegeEscalation, ROFS bool
	DropAll                                   bool
	Seccomp                                   corev1.SeccompProfileType
	ReadyPath, LivePath                       string
	ProbePortIsHealthFlag, LimitsSet          bool
	LookupBelowWebhookTimeout                 bool
	// IssuedSecret is the Secret cert-manager's Certificate writes.
	IssuedSecret string
	Objects      []string
}

func render(t *testing.T, dir string) deployed {
	t.Helper()
	objs := tst.Render(t, configDir, dir)
	var d appsv1.Deployment
	if !tst.Find(t, objs, "Deployment", "sandbox-fence-webhook", &d) {
		t.Fatalf("config/%s renders no Deployment", dir)
	}
	c := d.Spec.Template.Spec.Containers[0]
	// The shipped args must parse and validate exactly as the binary would.
	fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o := bindFlags(fs)
	if err := fs.Parse(c.Args); err != nil {
		t.Fatalf("shipped args %v: %v", c.Args, err)
	}
	if err := o.validate(); err != nil {
		t.Fatalf("shipped args %v: %v", c.Args, err)
	}
	out := deployed{
		Replicas: ptr.Deref(d.Spec.Replicas, 0), Image: c.Image, PullPolicy: c.ImagePullPolicy, CertRotation: o.certRotation,
		RunAsNonRoot:          ptr.Deref(d.Spec.Template.Spec.SecurityContext.RunAsNonRoot, false) && ptr.Deref(c.SecurityContext.RunAsNonRoot, false),
		NoPrivilegeEscalation: !ptr.Deref(c.SecurityContext.AllowPrivilegeEscalation, true),
		ROFS:                  ptr.Deref(c.SecurityContext.ReadOnlyRootFilesystem, false),
		DropAll:               c.SecurityContext.Capabilities != nil && cmp.Equal(c.SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"}),
		ReadyPath:             c.ReadinessProbe.HTTPGet.Path, LivePath: c.LivenessProbe.HTTPGet.Path,
		LimitsSet: !c.Resources.Limits.Cpu().IsZero() && !c.Resources.Limits.Memory().IsZero() && !c.Resources.Requests.Cpu().IsZero(),
		// The API server gives up after the entry's timeoutSeconds (5); the
		// webhook must answer with its own message first.
		LookupBelowWebhookTimeout: o.lookupTimeout < 5*time.Second,
	}
	if sc := d.Spec.Template.Spec.SecurityContext.SeccompProfile; sc != nil {
		out.Seccomp = sc.Type
	}
	for _, p := range c.Ports {
		if p.Name == c.ReadinessProbe.HTTPGet.Port.StrVal && p.Name == c.LivenessProbe.HTTPGet.Port.StrVal {
			out.ProbePortIsHealthFlag = ":"+strconv.Itoa(int(p.ContainerPort)) == o.probeAddr
		}
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath == o.certDir {
			out.CertDirMounted = m.Name
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.Name == m.Name && v.Secret != nil {
					out.CertSecret = v.Secret.SecretName
				}
				if v.Name == m.Name && v.EmptyDir != nil {
					out.CertDirInMemory = v.EmptyDir.Medium == corev1.StorageMediumMemory
				}
			}
		}
	}
	for _, obj := range objs {
		if obj.GetKind() == "Certificate" {
			out.IssuedSecret, _, _ = unstructured.NestedString(obj.Object, "spec", "secretName")
		}
		out.Objects = append(out.Objects, obj.GetKind()+"/"+obj.GetName())
	}
	sort.Strings(out.Objects)
	return out
}

func TestShippedDeployment(t *testing.T) {
	common := deployed{
		Replicas: 2, Image: "sandbox-fence/webhook:dev", PullPolicy: corev1.PullIfNotPresent,
		CertDirMounted: "certs",
		RunAsNonRoot:   true, NoPrivilegeEscalation: true, ROFS: true, DropAll: true, Seccomp: corev1.SeccompProfileTypeRuntimeDefault,
		ReadyPath: "/readyz", LivePath: "/healthz", ProbePortIsHealthFlag: true, LimitsSet: true, LookupBelowWebhookTimeout: true,
	}
	// The rotating binary writes its Secret's pair into a memory-backed
	// emptyDir (certFiles); cert-manager's Secret is mounted.
	rotating := common
	rotating.CertRotation = true
	rotating.CertDirInMemory = true
	rotating.Objects = []string{
		"ClusterRole/sandbox-fence-metrics-reader", "ClusterRole/sandbox-fence-webhook", "ClusterRole/sandbox-fence-webhook-cert-rotation",
		"ClusterRole/sandbox-fence-webhook-render",
		"ClusterRoleBinding/sandbox-fence-webhook", "ClusterRoleBinding/sandbox-fence-webhook-cert-rotation", "ClusterRoleBinding/sandbox-fence-webhook-render",
		"Deployment/sandbox-fence-webhook", "FlowSchema/sandbox-fence-webhook", "Namespace/sandbox-fence-system",
		"PodDisruptionBudget/sandbox-fence-webhook", "Role/sandbox-fence-webhook-cert-rotation", "Role/sandbox-fence-webhook-leader-election",
		"RoleBinding/sandbox-fence-webhook-cert-rotation", "RoleBinding/sandbox-fence-webhook-leader-election",
		"Secret/sandbox-fence-webhook-cert", "Service/sandbox-fence-webhook", "ServiceAccount/sandbox-fence-webhook",
		"ValidatingWebhookConfiguration/sandbox-fence-webhook",
	}
	certManager := common
	certManager.CertSecret = "sandbox-fence-webhook-cert"
	certManager.IssuedSecret = "sandbox-fence-webhook-cert"
	certManager.Objects = []string{
		"Certificate/sandbox-fence-webhook", "ClusterRole/sandbox-fence-metrics-reader", "ClusterRole/sandbox-fence-webhook",
		"ClusterRole/sandbox-fence-webhook-render", "ClusterRoleBinding/sandbox-fence-webhook", "ClusterRoleBinding/sandbox-fence-webhook-render",
		"Deployment/sandbox-fence-webhook", "FlowSchema/sandbox-fence-webhook", "Issuer/sandbox-fence-selfsigned", "Namespace/sandbox-fence-system",
		"PodDisruptionBudget/sandbox-fence-webhook", "Role/sandbox-fence-webhook-leader-election", "RoleBinding/sandbox-fence-webhook-leader-election",
		"Service/sandbox-fence-webhook", "ServiceAccount/sandbox-fence-webhook",
		"ValidatingWebhookConfiguration/sandbox-fence-webhook",
	}
	cases := []struct {
		name string
		dir  string
		want deployed
	}{{
		name: "the default install rotates its own certificate from a shipped empty Secret, written to memory",
		dir:  "webhook",
		want: rotating,
	}, {
		name: "the cert-manager overlay serves cert-manager's Secret and drops the rotation's RBAC",
		dir:  "webhook/overlays/cert-manager",
		want: certManager,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, render(t, tc.dir)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestEnforcementComponentSetsTheFlag parses the args the webhook runs with
// under each enforcement component exactly as the binary would: the
// component's appended --enforcement must be the one that wins.
func TestEnforcementComponentSetsTheFlag(t *testing.T) {
	for _, m := range enforcement.Modes {
		t.Run(string(m), func(t *testing.T) {
			var comps []string
			if m != enforcement.Deny {
				comps = append(comps, "components/enforcement/"+string(m))
			}
			var d appsv1.Deployment
			if !tst.Find(t, tst.Render(t, configDir, "default", comps...), "Deployment", "sandbox-fence-webhook", &d) {
				t.Fatal("no webhook Deployment")
			}
			fs := flag.NewFlagSet("webhook", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o := bindFlags(fs)
			if err := fs.Parse(d.Spec.Template.Spec.Containers[0].Args); err != nil {
				t.Fatal(err)
			}
			if err := o.validate(); err != nil {
				t.Fatal(err)
			}
			if o.enforcement != string(m) {
				t.Errorf("--enforcement=%s, want %s", o.enforcement, m)
			}
		})
	}
}
