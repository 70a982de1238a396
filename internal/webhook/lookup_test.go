package webhook_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
)

// failingReader answers its first failures Gets with err, then reads
// through.
type failingReader struct {
	client.Reader
	err      error
	failures int
	gets     int
}

func (f *failingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	f.gets++
	if f.gets <= f.failures {
		return f.err
	}
	return f.Reader.Get(ctx, key, obj, opts...)
}

// What client-go returns when the API server's address refuses the
// connection (a webhook pod whose route to it dropped for a moment).
var refused = &url.Error{Op: "Get", URL: "https://10.96.0.1:443/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/sandboxes/sandboxclaims/a",
	Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}

// The live read of an owner is retried while the API server cannot be
// reached and the lookup deadline allows, and only then: an answer is
// final. On kind a rolling restart right after kube-apiserver restarted
// refused 21 of 2846 valid writes for a second of refused connections.
func TestLiveOwnerReadRetriesOnlyWhileTheAPIServerIsUnreachable(t *testing.T) {
	claim := tst.MakeClaim("a").Obj()
	cnp := tst.MakeCNP(claim).Obj()
	cfg := tst.MakeConfig(fencev1alpha1.DefaultConfigName).Obj()
	cases := []struct {
		name     string
		err      error
		failures int
		// want is the verdict's message ("" when admitted); gets the live
		// reads, or minGets the least of them when the deadline ends it.
		want          string
		gets, minGets int
	}{{
		name: "two refused connections, then the owner: admitted", err: refused, failures: 2, gets: 3,
	}, {
		name: "a 503 from the API server, then the owner: admitted", err: apierrors.NewServiceUnavailable("starting"), failures: 1, gets: 2,
	}, {
		name: "refused until the lookup deadline: refused as timed out", err: refused, failures: 1 << 30, minGets: 3,
		want: `looking up the SandboxClaim "a" in namespace "sandboxes" timed out (`,
	}, {
		name: "a forbidden answer is not retried", err: apierrors.NewForbidden(schema.GroupResource{Group: "extensions.agents.x-k8s.io", Resource: "sandboxclaims"}, "a", errors.New("RBAC")), failures: 1 << 30, gets: 1,
		want: `looking up the SandboxClaim "a" in namespace "sandboxes" failed (`,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cache := fakeReader(t, cfg)
			live := &failingReader{Reader: fakeReader(t, claim), err: tc.err, failures: tc.failures}
			h := &webhook.CiliumHandler{
				Config:        webhook.ConfigSource{Reader: cache, Name: fencev1alpha1.DefaultConfigName},
				Owners:        &webhook.CachedOwners{Cache: cache, Live: live},
				LookupTimeout: 300 * time.Millisecond,
			}
			got := verdictOf(h.Handle(context.Background(), cnpRequest(t, admissionv1.Create, tst.HostUser, nil, cnp)))
			switch {
			case tc.want == "" && !got.Allowed:
				t.Errorf("want admitted, got %+v", got)
			case tc.want != "" && (got.Allowed || got.Code != 503 || !strings.Contains(got.Message, tc.want)):
				t.Errorf("want refused with %q, got %+v", tc.want, got)
			}
			if tc.minGets > 0 && live.gets < tc.minGets || tc.minGets == 0 && live.gets != tc.gets {
				t.Errorf("live reads: %d, want %d (at least %d)", live.gets, tc.gets, tc.minGets)
			}
		})
	}
}

// notCached is an informer cache's answer for an owner it has not seen yet.
var notCached = apierrors.NewNotFound(schema.GroupResource{Group: "extensions.agents.x-k8s.io", Resource: "sandboxclaims"}, "a")
