package fence_test

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// A fenced suspend built from one read of the Sandbox.
func ExampleBuildHolderEpochPatch() {
	sandbox := &unstructured.Unstructured{}
	sandbox.SetAnnotations(map[string]string{fence.AnnotationHolderEpoch: "2"})
	sandbox.SetResourceVersion("1001")

	held := uint64(2)
	read := fence.ReadHolderEpoch(sandbox)
	if !read.Allows(held) {
		fmt.Println("another host owns this workspace")
		return
	}
	ops, err := fence.BuildHolderEpochPatch(fence.PatchInput{
		Read:      read,
		Epoch:     &held,
		Mode:      fence.ModeSuspended,
		ChangedAt: fence.FormatChangedAt(time.Date(2026, 8, 1, 9, 0, 0, 0, time.UTC)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := fence.MarshalPatch(ops)
	fmt.Println(string(body))
	// Output:
	// [{"op":"test","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"2"},{"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1holder-epoch","value":"2"},{"op":"add","path":"/metadata/annotations/sandbox.namzu.ai~1operating-mode-changed-at","value":"2026-08-01T09:00:00.000Z"},{"op":"add","path":"/spec/operatingMode","value":"Suspended"}]
}

func ExamplePodTemplateHashJSON() {
	hash, _ := fence.PodTemplateHashJSON([]byte(`{"spec":{"nodeSelector":{"9":"b","10":"a","a":"c"}}}`))
	fmt.Println(hash)
	// Output: sha256:82a444e63998d49fe84f66cfff11f30bb4507540b445d30dca81df306912f5b9
}

func ExampleBuildPerSandboxPolicy() {
	policy, err := fence.BuildPerSandboxPolicy(fence.PolicyInput{
		Owner:     fence.PolicyOwner{Kind: fence.OwnerKindSandboxClaim, Name: "claim-1", UID: "0c9a7c6e"},
		Namespace: "work",
		Hosts:     []string{"registry.npmjs.org", ".example.com", "https://bad.example"},
	})
	fmt.Println(policy, err)
	// Output: <nil> hosts[2]: Invalid value: "https://bad.example": must be a DNS name of lowercase letters, digits, '-' and '.' (no scheme, port, path or trailing dot)
}
