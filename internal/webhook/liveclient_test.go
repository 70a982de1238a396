package webhook_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"

	"github.com/sandbox-fence/sandbox-fence/internal/admit"
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
	"github.com/sandbox-fence/sandbox-fence/internal/webhook"
)

// stuckFirstConnection is an API server whose first client connection
// accepts requests and never answers them (what one webhook pod saw on
// kind after kube-apiserver restarted: RELIABILITY.md finding 8), while a
// new connection is answered.
type stuckFirstConnection struct {
	body []byte

	mu    sync.Mutex
	stuck string // the first connection's remote address
	conns map[string]bool
}

func (s *stuckFirstConnection) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.stuck == "" {
		s.stuck = r.RemoteAddr
	}
	s.conns[r.RemoteAddr] = true
	stuck := r.RemoteAddr == s.stuck
	s.mu.Unlock()
	if stuck {
		<-r.Context().Done()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(s.body)
}

func (s *stuckFirstConnection) connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// A live read that hangs is cut at the attempt timeout and retried on a
// new connection, within the lookup deadline. Over HTTP/2 the retry would
// otherwise be sent on the same connection and hang as well, and the valid
// write would be refused as timed out.
func TestALiveOwnerReadThatHangsIsRetriedOnANewConnection(t *testing.T) {
	claim := tst.MakeClaim("a").Obj()
	body, err := json.Marshal(claim.Object)
	if err != nil {
		t.Fatal(err)
	}
	api := &stuckFirstConnection{body: body, conns: map[string]bool{}}
	srv := httptest.NewUnstartedServer(api)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)

	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(tst.ClaimGVK, meta.RESTScopeNamespace)
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{
		CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}),
	}}
	live, drop, err := webhook.NewLiveReader(cfg, scheme(t), mapper)
	if err != nil {
		t.Fatal(err)
	}
	owners := &webhook.CachedOwners{Cache: fakeReader(t), Live: live, DropConnections: drop, AttemptTimeout: 200 * time.Millisecond}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	got, err := owners.GetOwner(ctx, admit.ClaimOwner, claim.GetNamespace(), claim.GetName(), admit.Expected{UID: claim.GetUID()})
	if err != nil {
		t.Fatalf("after %v: %v (the API server saw %d connection(s))", time.Since(start), err, api.connections())
	}
	if got.GetUID() != claim.GetUID() {
		t.Errorf("owner uid %q, want %q", got.GetUID(), claim.GetUID())
	}
	if n := api.connections(); n != 2 {
		t.Errorf("the API server saw %d connections, want 2 (the stuck one, then a new one)", n)
	}
}
