package fence_test

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// benchTemplate is a pod template of the size a host really writes: the
// template label, one agent container with env, resources, mounts and a
// restricted security context, and the workspace volume device.
func benchTemplate(b *testing.B) map[string]any {
	b.Helper()
	const text = `{
  "metadata": {"labels": {"sandbox.namzu.ai/template": "namzu-workspace", "sandbox.namzu.ai/per-sandbox-egress": "claim-7f3c"},
               "annotations": {"kubectl.kubernetes.io/default-container": "main"}},
  "spec": {
    "runtimeClassName": "gvisor",
    "terminationGracePeriodSeconds": 5,
    "automountServiceAccountToken": false,
    "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "fsGroup": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [{
      "name": "main", "image": "registry.example.com/namzu/agent:1.42.0@sha256:5d2a1f0c7e9b8a6d4c3b2a190817263544536271809a0b1c2d3e4f5a6b7c8d9e",
      "command": ["/usr/local/bin/agent"], "args": ["--workspace=/workspace", "--listen=0.0.0.0:8080", "--log-format=json"],
      "env": [{"name": "NAMZU_SANDBOX", "value": "claim-7f3c"}, {"name": "HOME", "value": "/workspace"},
              {"name": "NODE_OPTIONS", "value": "--max-old-space-size=2048"}, {"name": "TZ", "value": "UTC"}],
      "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
      "resources": {"requests": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "2Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}},
      "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}},
      "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
      "volumeDevices": [{"name": "workspace", "devicePath": "/dev/workspace"}],
      "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 2, "failureThreshold": 3}
    }],
    "volumes": [{"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "256Mi"}}],
    "tolerations": [{"key": "sandbox.namzu.ai/dedicated", "operator": "Exists", "effect": "NoSchedule"}]
  }
}`
	var m map[string]any
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		b.Fatal(err)
	}
	return m
}

func stored(annotations map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
		"metadata": map[string]any{"name": "ws", "namespace": "sandboxes", "resourceVersion": "1001"},
		"spec":     map[string]any{"operatingMode": fence.ModeRunning},
	}}
	if annotations != nil {
		u.SetAnnotations(annotations)
	}
	return u
}

// BenchmarkBuildHolderEpochPatch is the host's cost per fenced write, from
// the gate read to the wire bytes: read the epoch, build the fenced patch,
// marshal it.
func BenchmarkBuildHolderEpochPatch(b *testing.B) {
	epoch := uint64(2)
	tpl := benchTemplate(b)
	hash, err := fence.PodTemplateHash(tpl)
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name string
		obj  *unstructured.Unstructured
		in   func(fence.Reading) fence.PatchInput
	}{{
		name: "steady-state suspend",
		obj:  stored(map[string]string{fence.AnnotationHolderEpoch: "2"}),
		in: func(r fence.Reading) fence.PatchInput {
			return fence.PatchInput{Read: r, Epoch: &epoch, Mode: fence.ModeSuspended, ChangedAt: "2026-08-01T09:00:00.000Z"}
		},
	}, {
		name: "migration without annotations",
		obj:  stored(nil),
		in: func(r fence.Reading) fence.PatchInput {
			return fence.PatchInput{Read: r, Epoch: &epoch, Mode: fence.ModeSuspended, ChangedAt: "2026-08-01T09:00:00.000Z"}
		},
	}, {
		name: "stamp only",
		obj:  stored(map[string]string{fence.AnnotationHolderEpoch: "1"}),
		in:   func(r fence.Reading) fence.PatchInput { return fence.PatchInput{Read: r, Epoch: &epoch} },
	}, {
		name: "template refresh",
		obj:  stored(map[string]string{fence.AnnotationHolderEpoch: "2"}),
		in: func(r fence.Reading) fence.PatchInput {
			return fence.PatchInput{Read: r, Epoch: &epoch, Mode: fence.ModeRunning, ChangedAt: "2026-08-01T09:00:00.000Z",
				ExtraAnnotations: []fence.Annotation{{Key: fence.AnnotationPodTemplateHash, Value: hash}},
				PodTemplate:      tpl,
				ExtraTests:       []fence.Operation{{Op: fence.OpTest, Path: "/spec/operatingMode", Value: fence.ModeSuspended}}}
		},
	}}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var size int
			for b.Loop() {
				ops, err := fence.BuildHolderEpochPatch(c.in(fence.ReadHolderEpoch(c.obj)))
				if err != nil {
					b.Fatal(err)
				}
				body, err := fence.MarshalPatch(ops)
				if err != nil {
					b.Fatal(err)
				}
				size = len(body)
			}
			b.ReportMetric(float64(size), "bytes/patch")
		})
	}
}

// BenchmarkPodTemplateHash is the canonical JSON + SHA-256 of the host's hash,
// on the contract's smallest vector and on a realistic template.
func BenchmarkPodTemplateHash(b *testing.B) {
	small := map[string]any{"spec": map[string]any{"nodeSelector": map[string]any{"9": "b", "10": "a", "a": "c"}}}
	for _, c := range []struct {
		name string
		tpl  any
	}{{"contract vector", small}, {"realistic template", benchTemplate(b)}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := fence.PodTemplateHash(c.tpl); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBuildPerSandboxPolicy is the host's cost to build the per-sandbox
// policy body, host-name grammar included.
func BenchmarkBuildPerSandboxPolicy(b *testing.B) {
	in := fence.PolicyInput{
		Owner:     fence.PolicyOwner{Kind: "SandboxClaim", Name: "claim-7f3c", UID: "6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"},
		Namespace: "sandboxes",
		Hosts:     []string{"registry.npmjs.org", "api.example.com", ".example.org", "github.com", ".githubusercontent.com"},
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := fence.BuildPerSandboxPolicy(in); err != nil {
			b.Fatal(err)
		}
	}
}
