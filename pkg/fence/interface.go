package fence

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Interface is what a host calls on a Client. Hosts that hold an Interface
// instead of a *Client can test their own logic against fencetest.Fake,
// without an API server.
type Interface interface {
	CreateWorkspace(ctx context.Context, sandbox *unstructured.Unstructured, opts WriteOptions) (*unstructured.Unstructured, error)
	Suspend(ctx context.Context, namespace, name string, opts WriteOptions) (*unstructured.Unstructured, error)
	Resume(ctx context.Context, namespace, name string, opts WriteOptions) (*unstructured.Unstructured, error)
	Stamp(ctx context.Context, namespace, name string, opts WriteOptions) (*unstructured.Unstructured, error)
	RefreshTemplate(ctx context.Context, namespace, name string, template any, opts WriteOptions) (*unstructured.Unstructured, error)
	Delete(ctx context.Context, namespace, name string, opts WriteOptions) error
	DeleteClaim(ctx context.Context, namespace, name string, opts WriteOptions) error
	ApplyEgress(ctx context.Context, in PolicyInput) (*unstructured.Unstructured, error)
	RemoveEgress(ctx context.Context, namespace, ownerUID string) error
	CheckEgressFence(ctx context.Context) error
}

var _ Interface = (*Client)(nil)
