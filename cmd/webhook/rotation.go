package main

import (
	"net/http"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Why the rotation's informers are narrowed on the wire: cert-controller
// v0.16.0 builds its own cache (rotator.addNamespacedCache) from the
// manager's rest.Config with no field or label selector, so its Secret
// informer lists and watches every Secret of the namespace and its webhook
// informer every ValidatingWebhookConfiguration. RBAC can only grant that
// with unrestricted list and watch. A list or watch that carries
// fieldSelector=metadata.name=<name> is authorized against resourceNames,
// so the rotation's manager gets a rest.Config whose transport adds that
// selector to exactly those two collections, and config/webhook's RBAC
// names both objects for every verb (rbac-cert-rotation.yaml).

// namedCollections maps the path of a collection (without the server's
// prefix) to the one name its lists and watches are narrowed to.
type namedCollections map[string]string

// rotationCollections are the two collections cert-controller's cache
// reads.
func rotationCollections(namespace, secret, webhookConfig string) namedCollections {
	return namedCollections{
		"/api/v1/namespaces/" + namespace + "/secrets":                          secret,
		"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations": webhookConfig,
	}
}

// onlyNamed is a RoundTripper that adds metadata.name=<name> to the field
// selector of every GET of a collection in c (a list or a watch); every
// other request passes unchanged.
type onlyNamed struct {
	next http.RoundTripper
	c    namedCollections
}

func (o onlyNamed) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		return o.next.RoundTrip(req)
	}
	name, ok := o.c.match(req.URL.Path)
	if !ok {
		return o.next.RoundTrip(req)
	}
	q := req.URL.Query()
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	if old := q.Get("fieldSelector"); old != "" {
		sel = old + "," + sel
	}
	q.Set("fieldSelector", sel)
	r := req.Clone(req.Context())
	u := *req.URL
	u.RawQuery = q.Encode()
	r.URL = &u
	return o.next.RoundTrip(r)
}

// match finds the collection p is, allowing a server path prefix (a
// kubeconfig server of https://host/k8s/clusters/x).
func (c namedCollections) match(p string) (string, bool) {
	p = path.Clean("/" + p)
	for coll, name := range c {
		if strings.HasSuffix(p, coll) {
			return name, true
		}
	}
	return "", false
}

// narrowedConfig returns a copy of cfg whose lists and watches of the
// collections in c are narrowed to their one object.
func narrowedConfig(cfg *rest.Config, c namedCollections) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper { return onlyNamed{next: rt, c: c} })
	return out
}

// rotationManager is the manager cert-controller is given: the same
// manager, but GetConfig returns the narrowed configuration, which
// AddRotator uses for its cache and for nothing else (its writes go
// through the manager's client, by name).
type rotationManager struct {
	manager.Manager
	cfg *rest.Config
}

func (m rotationManager) GetConfig() *rest.Config { return m.cfg }
