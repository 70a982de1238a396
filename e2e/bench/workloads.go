package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	authzv1 "k8s.io/api/authorization/v1"

	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// workload is one kind of host traffic. op runs one operation of worker i;
// every worker owns its objects, so workers never conflict and every
// operation must succeed.
type workload struct {
	Name string
	// Requests describes one operation on the wire.
	Requests string
	op       func(ctx context.Context, i int) error
	// refusable: an enforcer may refuse an operation of it (a peer that
	// has not yet seen a new owner); a refusal is counted, not fatal.
	refusable bool
}

// hostClients are the host's clients for the whole run: one process, one
// connection pool, no client-side rate limit (the default 5 QPS, or the
// framework's 100, would measure the limiter instead of the server).
type hostClients struct {
	fence *fence.Client
	kube  kubernetes.Interface
	dyn   dynamic.Interface
	rec   *recorder
}

func newHostClients(env *framework.Env) (*hostClients, error) {
	cfg := rest.CopyConfig(env.Host.Config)
	cfg.QPS, cfg.Burst = -1, 0
	rec := &recorder{}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { rec.next = rt; return rec }
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &hostClients{fence: fence.NewClient(dyn, fence.Options{}), kube: kc, dyn: dyn, rec: rec}, nil
}

// fixtures are the objects each worker owns.
type fixtures struct {
	ns        string
	sandboxes []string
	epochs    []uint64
	claims    []fence.PolicyOwner
	mu        sync.Mutex
	cmSeq     []int
}

// grantConfigMaps gives the host what the control workload needs. The host
// Role has no ConfigMap rights; an unrelated controller running
// under the same ServiceAccount would.
func grantConfigMaps(ctx context.Context, env *framework.Env) error {
	kc := env.Admin.Kube
	ns := env.HostNamespace
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-configmaps"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get", "delete"}}},
	}
	if _, err := kc.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-configmaps"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "bench-configmaps"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: framework.HostServiceAccount, Namespace: ns}},
	}
	if _, err := kc.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return env.WaitAllowed(ctx, env.Host, authzv1.ResourceAttributes{Namespace: ns, Verb: "create", Resource: "configmaps"})
}

// makeFixtures creates, as the host and with the fence fully installed, one
// fenced Sandbox and one SandboxClaim (the owner of its per-sandbox policy)
// per worker.
func makeFixtures(ctx context.Context, env *framework.Env, hc *hostClients, workers int) (*fixtures, error) {
	f := &fixtures{ns: env.HostNamespace, cmSeq: make([]int, workers)}
	claims := env.Host.Dynamic.Resource(framework.ClaimGVR).Namespace(f.ns)
	for i := range workers {
		name := fmt.Sprintf("bench-sbx-%02d", i)
		epoch := uint64(1)
		obj := framework.MakeSandbox(f.ns, name).PodLabel(fence.DefaultPerSandboxLabelKey, name).Obj()
		if _, err := hc.fence.CreateWorkspace(ctx, obj, fence.WriteOptions{Epoch: &epoch}); err != nil {
			return nil, fmt.Errorf("fixture %s: %w", name, err)
		}
		f.sandboxes = append(f.sandboxes, name)
		f.epochs = append(f.epochs, epoch)

		cname := fmt.Sprintf("bench-claim-%02d", i)
		c, err := claims.Create(ctx, framework.MakeClaim(f.ns, cname).PodLabel(fence.DefaultPerSandboxLabelKey, cname).Obj(), metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("fixture %s: %w", cname, err)
		}
		f.claims = append(f.claims, fence.PolicyOwner{Kind: "SandboxClaim", Name: cname, UID: string(c.GetUID())})
	}
	// The host checks the fence once per client, before its first policy
	// write; do it now, while the bindings exist.
	return f, hc.fence.CheckEgressFence(ctx)
}

// egressHosts is a realistic allowlist: a registry, an API and a wildcard.
var egressHosts = []string{"registry.npmjs.org", "api.example.com", ".example.org"}

func workloads(hc *hostClients, f *fixtures) []workload {
	return []workload{{
		Name:     "sandbox",
		Requests: "fenced suspend / resume / stamp (next epoch): GET + JSON PATCH each",
		op: func(ctx context.Context, i int) error {
			// One cycle per three operations, the epoch raised by the stamp:
			// raises (m > o) and unchanged re-stamps (m == o) both run.
			name := f.sandboxes[i]
			e := f.epochs[i]
			var err error
			switch f.next(i) % 3 {
			case 0:
				_, err = hc.fence.Suspend(ctx, f.ns, name, fence.WriteOptions{Epoch: &e})
			case 1:
				_, err = hc.fence.Resume(ctx, f.ns, name, fence.WriteOptions{Epoch: &e})
			case 2:
				e++
				if _, err = hc.fence.Stamp(ctx, f.ns, name, fence.WriteOptions{Epoch: &e}); err == nil {
					f.epochs[i] = e
				}
			}
			return err
		},
	}, {
		Name:     "cnp",
		Requests: "ApplyEgress (POST + read-back GET) then RemoveEgress (DELETE)",
		op: func(ctx context.Context, i int) error {
			owner := f.claims[i]
			if _, err := hc.fence.ApplyEgress(ctx, fence.PolicyInput{Owner: owner, Namespace: f.ns, Hosts: egressHosts}); err != nil {
				return err
			}
			return hc.fence.RemoveEgress(ctx, f.ns, owner.UID)
		},
	}, {
		Name:      "claim+cnp",
		Requests:  "the host's own flow: a new SandboxClaim (POST), its ApplyEgress (POST + read-back GET), RemoveEgress (DELETE), the claim's DELETE",
		refusable: true,
		op: func(ctx context.Context, i int) (err error) {
			name := fmt.Sprintf("bench-new-%02d-%d", i, f.next(i))
			claims := hc.dyn.Resource(framework.ClaimGVR).Namespace(f.ns)
			c, err := claims.Create(ctx, framework.MakeClaim(f.ns, name).PodLabel(fence.DefaultPerSandboxLabelKey, name).Obj(), metav1.CreateOptions{})
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, claims.Delete(ctx, name, metav1.DeleteOptions{})) }()
			owner := fence.PolicyOwner{Kind: "SandboxClaim", Name: name, UID: string(c.GetUID())}
			if _, err := hc.fence.ApplyEgress(ctx, fence.PolicyInput{Owner: owner, Namespace: f.ns, Hosts: egressHosts}); err != nil {
				return err
			}
			return hc.fence.RemoveEgress(ctx, f.ns, owner.UID)
		},
	}, {
		Name:     "configmap",
		Requests: "ConfigMap POST then DELETE in the same opted-in namespace",
		op: func(ctx context.Context, i int) error {
			name := fmt.Sprintf("bench-cm-%02d-%d", i, f.next(i))
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"settings.json": strings.Repeat("x", 512)}}
			cms := hc.kube.CoreV1().ConfigMaps(f.ns)
			if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				return err
			}
			return cms.Delete(ctx, name, metav1.DeleteOptions{})
		},
	}}
}

// next returns worker i's operation counter and advances it.
func (f *fixtures) next(i int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.cmSeq[i]
	f.cmSeq[i]++
	return n
}

// cellResult is one window of one (config, workload, concurrency).
type cellResult struct {
	round   int
	config  string
	clients int
	elapsed time.Duration
	sink    *sink
	// cpu is the CPU time each metered process spent during the window.
	cpu map[string]time.Duration
	// owner is the webhook's owner-read histogram over the window, where
	// the configuration runs the webhook.
	owner scrape
}

// runWindow runs `clients` workers of w in a closed loop for d and returns
// what they measured. Each worker finishes its operation in flight, so no
// operation is cut in half (cutting would leave objects behind).
func runWindow(ctx context.Context, hc *hostClients, w workload, clients int, d time.Duration) (*sink, time.Duration) {
	s := &sink{}
	hc.rec.current.Store(s)
	defer hc.rec.current.Store(nil)
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t := time.Now()
				err := w.op(ctx, i)
				s.op(time.Since(t), err)
			}
		})
	}
	wg.Wait()
	return s, time.Since(start)
}

// runOpenWindow sends w's operations at a fixed rate per second for d, each
// on the objects of a free worker (slots of them), and times each from its
// scheduled send: a server that falls behind shows as queueing in the
// latency, as it does for a host whose work arrives on its own schedule.
// The closed loop (runWindow) finds the capacity this rate stays under.
func runOpenWindow(ctx context.Context, hc *hostClients, w workload, rate float64, slots int, d time.Duration) (*sink, time.Duration) {
	s := &sink{}
	hc.rec.current.Store(s)
	defer hc.rec.current.Store(nil)
	free := make(chan int, slots)
	for i := range slots {
		free <- i
	}
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	var wg sync.WaitGroup
	for k := 0; ctx.Err() == nil; k++ {
		at := start.Add(time.Duration(k) * interval)
		if at.Sub(start) >= d {
			break
		}
		time.Sleep(time.Until(at))
		wg.Go(func() {
			i := <-free
			defer func() { free <- i }()
			err := w.op(ctx, i)
			s.op(time.Since(at), err)
		})
	}
	wg.Wait()
	return s, time.Since(start)
}
