// Package fence is the Go client of the sandbox-fence wire contract: the
// holder-epoch fencing token on agent Sandboxes and the per-sandbox
// CiliumNetworkPolicy egress fence (docs/contract.md in the project).
//
// The pure parts build exactly the bytes a TypeScript host of @namzu/sandbox
// sends, so Go and TypeScript hosts can drive the same workspaces:
//
//   - ReadHolderEpoch and ParseEpoch read the epoch of one GET;
//   - BuildHolderEpochPatch builds the conditional JSON Patch of a fenced write
//     and BuildMergePatch the body of an unfenced one;
//   - PodTemplateHash reproduces the host's pod-template-hash;
//   - NormalizeHost and BuildPerSandboxPolicy build the per-sandbox egress
//     policy.
//
// Each of them names the section of docs/contract.md whose bytes it builds.
//
// A fenced suspend, from one read:
//
//	read := fence.ReadHolderEpoch(sandbox)
//	if !read.Allows(held) {
//		return errors.New("another host owns this workspace")
//	}
//	ops, err := fence.BuildHolderEpochPatch(fence.PatchInput{
//		Read:      read,
//		Epoch:     &held,
//		Mode:      fence.ModeSuspended,
//		ChangedAt: fence.FormatChangedAt(time.Now()),
//	})
//	body, err := fence.MarshalPatch(ops) // PATCH as application/json-patch+json
//
// Client runs those writes against the API server with the gate read, the
// local refusals and the bounded retries the contract gives a host, and
// returns errors to branch on:
//
//	c := fence.NewClient(dynamic.NewForConfigOrDie(cfg), fence.Options{})
//	_, err := c.Suspend(ctx, "work", "sandbox-1", fence.WriteOptions{Epoch: &held})
//	var denied *fence.AdmissionDeniedError
//	switch {
//	case errors.Is(err, fence.ErrStaleEpoch):
//		// another host took the workspace over: stop driving it
//	case errors.As(err, &denied):
//		// the server-side fence refused: denied.Policy, denied.Message
//	}
//
// Every Sandbox write and delete takes its epoch in WriteOptions, as
// client-go's calls take metav1.UpdateOptions: the zero value sends the
// unfenced request a host without epochs always sent, which the server
// still admits; only Stamp requires an epoch. Hosts that hold the Interface
// rather than a *Client can unit-test against fencetest.Fake; Options.Clock
// takes a k8s.io/utils/clock fake.
//
// Sandboxes are unstructured.Unstructured, not agent-sandbox's Go types:
// those live in sigs.k8s.io/agent-sandbox, whose go.mod requires
// controller-runtime and the controller's own dependencies, which would then
// enter every host's module graph.
//
// The epoch itself can come from a coordination.k8s.io/v1 Lease:
// fencelease.TakeOver (package pkg/fence/fencelease) campaigns for one with
// client-go's leader election and leads with spec.leaseTransitions+1 of its
// own acquisition. That count rises with every take-over only while the
// Lease is never deleted, never lowered by hand, and every candidate is a
// new identity; contract §3.7 says where it holds and where it does not.
//
// The package is a module of its own and imports nothing of the project's
// internals: it is the public client, and the admission side only ever sees
// the bytes it sends.
package fence
