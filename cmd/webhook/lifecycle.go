package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sandbox-fence/sandbox-fence/internal/buildinfo"
	"github.com/sandbox-fence/sandbox-fence/internal/lifecycle"
)

const lifecycleUsage = `usage: webhook lifecycle STEP [flags]

The steps of an install's lifecycle Helm cannot order itself; the chart runs
each as a hook Job (docs/install.md, Install with Helm):

  upgrade-crds   replace the CRDs' specs with this binary's (before an upgrade)
  unfence        delete the release's webhook configuration, then its
                 bindings, then its policies (before an uninstall)
  delete-crds    delete the CRDs (after an uninstall that does not keep them)
`

// runLifecycle runs `webhook lifecycle STEP`, returning the exit code.
func runLifecycle(args []string) int {
	fs := flag.NewFlagSet("lifecycle", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), lifecycleUsage); fs.PrintDefaults() }
	namespace := fs.String("namespace", podNamespace(), "The release namespace, whose webhook ServiceAccount the CRD refuses as a host (defaults to $POD_NAMESPACE).")
	release := fs.String("release", "", "The Helm release whose objects unfence deletes (label app.kubernetes.io/instance).")
	version := fs.String("version", buildinfo.Version(), "The release version upgrade-crds labels the CRDs with (app.kubernetes.io/version).")
	steps := map[string]func(context.Context, client.Client, func(string, ...any)) error{
		"upgrade-crds": func(ctx context.Context, c client.Client, logf func(string, ...any)) error {
			return lifecycle.UpgradeCRDs(ctx, c, *namespace, *version, logf)
		},
		"unfence": func(ctx context.Context, c client.Client, logf func(string, ...any)) error {
			return lifecycle.Unfence(ctx, c, *release, logf)
		},
		"delete-crds": lifecycle.DeleteCRDs,
	}
	if len(args) == 0 {
		fs.Usage()
		return 2
	}
	step := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	run, ok := steps[step]
	switch {
	case !ok:
		fmt.Fprintf(os.Stderr, "lifecycle: unknown step %q\n\n%s", step, lifecycleUsage)
		return 2
	case step == "unfence" && *release == "":
		fmt.Fprintln(os.Stderr, "lifecycle unfence: --release is required: the Helm release whose objects to delete")
		return 2
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintf(os.Stderr, "lifecycle %s: no Kubernetes client configuration (in-cluster, or $KUBECONFIG): %v\n", step, err)
		return 1
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "lifecycle %s: %v\n", step, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logf := func(format string, a ...any) { fmt.Printf("lifecycle %s: "+format+"\n", append([]any{step}, a...)...) }
	err = run(ctx, c, logf)
	if err != nil {
		fmt.Fprintf(os.Stderr, "lifecycle %s: %v\n", step, err)
		return 1
	}
	return 0
}
