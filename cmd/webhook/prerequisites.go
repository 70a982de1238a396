package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/record"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/pkg/fence"
)

// prerequisite is an API the webhook needs served before it starts: the
// owners it caches, its configuration, and the kind it admits.
type prerequisite struct {
	gvk schema.GroupVersionKind
	// from says what installs it (docs/install.md, Prerequisites).
	from string
}

var prerequisites = []prerequisite{
	{fence.SandboxGVK, "agent-sandbox"},
	{fence.SandboxClaimGVK, "agent-sandbox's extensions"},
	{fencev1alpha1.GroupVersion.WithKind(fencev1alpha1.Kind), "sandbox-fence (config/crd)"},
	{fence.CiliumNetworkPolicyGVK, "Cilium"},
}

// missingAPIs lists the prerequisites discovery does not serve, each as
// "Kind group/version (from)". An error is a discovery that did not answer.
func missingAPIs(d discovery.DiscoveryInterface) ([]string, error) {
	var missing []string
	served := map[string][]string{} // group/version → kinds
	for _, p := range prerequisites {
		gv := p.gvk.GroupVersion().String()
		kinds, ok := served[gv]
		if !ok {
			list, err := d.ServerResourcesForGroupVersion(gv)
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return nil, fmt.Errorf("asking the API server whether it serves %s: %w", gv, err)
			default:
				for _, r := range list.APIResources {
					kinds = append(kinds, r.Kind)
				}
			}
			served[gv] = kinds
		}
		if !slices.Contains(kinds, p.gvk.Kind) {
			missing = append(missing, fmt.Sprintf("%s %s (%s)", p.gvk.Kind, gv, p.from))
		}
	}
	return missing, nil
}

// prerequisitePoll is how often a webhook waiting for its CRDs asks again.
var prerequisitePoll = 5 * time.Second

// waitForPrerequisites returns once the API server serves every
// prerequisite. Until then it serves the probes on probeAddr itself: the
// webhook is alive (no restart would help, so no crash loop) and not ready,
// and /readyz names what is missing; an Event on the pod says it too
// (kubectl describe pod). The manager, whose cache needs those kinds to
// exist, is created only after. It returns at once when nothing is
// missing, and the context's error when it is cancelled while waiting.
func waitForPrerequisites(ctx context.Context, d discovery.DiscoveryInterface, probeAddr string, pod *corev1.ObjectReference, recorder record.EventRecorder, log logr.Logger) error {
	missing, err := missingAPIs(d)
	if err == nil && len(missing) == 0 {
		return nil
	}
	// status is what /readyz says; the poll below sets it, the probe
	// server's goroutines read it.
	var status atomic.Pointer[string]
	report := func(missing []string, err error) {
		msg := ""
		if err != nil {
			msg = err.Error()
		} else {
			msg = "the API server does not serve " + strings.Join(missing, ", ") + ": install what is missing; the webhook starts once every kind is served"
		}
		if old := status.Swap(&msg); old == nil || *old != msg {
			log.Info("waiting for prerequisites", "reason", msg)
			if pod != nil && recorder != nil {
				recorder.Event(pod, corev1.EventTypeWarning, "MissingPrerequisites", msg)
			}
		}
	}
	report(missing, err)

	stop, err := serveProbes(probeAddr, func() error { return errors.New(*status.Load()) })
	if err != nil {
		return err
	}
	defer stop()
	return wait.PollUntilContextCancel(ctx, prerequisitePoll, false, func(context.Context) (bool, error) {
		missing, err := missingAPIs(d)
		if err == nil && len(missing) == 0 {
			log.Info("prerequisites served; starting")
			return true, nil
		}
		report(missing, err)
		return false, nil
	})
}

// serveProbes answers /healthz with ok and /readyz with notReady's error,
// on addr ("0" or "" serves nothing), until stop is called.
func serveProbes(addr string, notReady func() error) (stop func(), err error) {
	if addr == "" || addr == "0" {
		return func() {}, nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not ready: "+notReady().Error(), http.StatusServiceUnavailable)
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serving the probes on %s while waiting for prerequisites: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx) // frees addr for the manager's probe server
	}, nil
}
