// Command inspect checks a packaged chart (a release's
// sandbox-fence-X.Y.Z.tgz) with Helm's own code, for hack/release's tests,
// whose module does not depend on Helm:
//
//	go run ./inspect ../../dist/sandbox-fence-0.1.0.tgz
//
// It runs Helm's linter over the package (helm lint X.tgz; any message
// above INFO fails, as TestChartLints does for the chart directory) and
// renders it with the default values (helm template), printing each image a
// container of the rendering runs, one "image: <ref>" line each. Both at the
// oldest Kubernetes release the chart supports (internal/kubeversion):
// Helm's client-only default, v1.20, is below the chart's kubeVersion.
package main

import (
	"fmt"
	"os"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"

	"github.com/sandbox-fence/sandbox-fence/hack/chart/render"
	"github.com/sandbox-fence/sandbox-fence/internal/kubeversion"
)

func main() {
	if len(os.Args) != 2 || !strings.HasSuffix(os.Args[1], ".tgz") {
		fmt.Fprintln(os.Stderr, "usage: inspect CHART.tgz")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "inspect:", err)
		os.Exit(1)
	}
}

func run(pkg string) error {
	kv, err := chartutil.ParseKubeVersion(kubeversion.Minimum)
	if err != nil {
		return err
	}
	l := action.NewLint()
	l.Namespace, l.KubeVersion = "default", kv
	res := l.Run([]string{pkg}, nil)
	var bad []string
	for _, m := range res.Messages {
		if m.Severity > support.InfoSev {
			bad = append(bad, m.Error())
		}
	}
	for _, err := range res.Errors {
		bad = append(bad, err.Error())
	}
	if len(bad) > 0 {
		return fmt.Errorf("helm lint %s:\n%s", pkg, strings.Join(bad, "\n"))
	}

	ch, err := loader.Load(pkg)
	if err != nil {
		return err
	}
	objs, err := render.Template(ch, nil, kv)
	if err != nil {
		return err
	}
	for _, m := range objs {
		spec, _ := m["spec"].(map[string]any)
		tmpl, _ := spec["template"].(map[string]any)
		pod, _ := tmpl["spec"].(map[string]any)
		for _, key := range []string{"initContainers", "containers"} {
			cs, _ := pod[key].([]any)
			for _, c := range cs {
				if img, _ := c.(map[string]any)["image"].(string); img != "" {
					fmt.Println("image: " + img)
				}
			}
		}
	}
	return nil
}
