package fencectl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/config"
	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
	"github.com/sandbox-fence/sandbox-fence/policies"
)

// TestOptions are the inputs of `kubectl fence test`.
type TestOptions struct {
	// Files are case files, or directories whose *.yaml are cases
	// (policies/README.md, Cases).
	Files []string
	// Policies is a directory holding <name>/policy.yaml and its binding;
	// empty: the policies this binary ships.
	Policies string
	// Config is a file holding the FenceConfig the cases run under unless
	// their params say otherwise; empty: the examples'
	// (policies/testdata/fenceconfig.yaml).
	Config string
	// Namespaces is a file of Namespace documents, the cluster's namespaces
	// with their labels; empty: the examples' (policies/testdata/namespaces.yaml).
	Namespaces string
}

// TestReport is the output of `kubectl fence test`.
type TestReport struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Passed     int          `json:"passed"`
	Failed     int          `json:"failed"`
	Results    []TestResult `json:"results"`
}

// TestResult is one case: the verdict the policies gave and whether it is
// the one the case expects.
type TestResult struct {
	File        string `json:"file"`
	Description string `json:"description"`
	Pass        bool   `json:"pass"`
	// Verdict is "admitted", or "denied" with the HTTP code and reason.
	Verdict string `json:"verdict"`
	// Message is the denial as the API server words it.
	Message string `json:"message,omitempty"`
	// Problems say how the verdict differs from the case's expect.
	Problems []string `json:"problems,omitempty"`
}

// RunTests evaluates every case with the API server's own validating
// admission policy plugin (internal/vapeval), as policies/README.md
// describes: the policies with the case's configuration rendered into them
// as the controller would, every binding in Deny mode, failing closed. No
// cluster is read.
func RunTests(ctx context.Context, o TestOptions) (*TestReport, error) {
	if len(o.Files) == 0 {
		return nil, errors.New("no cases: name case files or directories with -f")
	}
	suite, err := testSuite(o)
	if err != nil {
		return nil, err
	}
	defer suite.Stop()
	cases, err := vapeval.LoadCaseFiles(o.Files...)
	if err != nil {
		return nil, err
	}
	if len(cases) == 0 {
		return nil, fmt.Errorf("no *.yaml cases in %s", strings.Join(o.Files, ", "))
	}
	r := &TestReport{APIVersion: fencev1alpha1.GroupVersion.String(), Kind: "TestReport", Results: []TestResult{}}
	for _, c := range cases {
		v, err := suite.Run(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.File, err)
		}
		res := TestResult{File: c.File, Description: c.Description, Verdict: "admitted", Problems: c.Problems(v)}
		if !v.Allowed {
			res.Verdict, res.Message = fmt.Sprintf("denied (%d %s)", v.Code, v.Reason), v.Message
		}
		res.Pass = len(res.Problems) == 0
		if res.Pass {
			r.Passed++
		} else {
			r.Failed++
		}
		r.Results = append(r.Results, res)
	}
	return r, nil
}

// testSuite loads the policies, the default configuration and the
// namespaces, each from the option's file or from what the binary ships.
func testSuite(o TestOptions) (*vapeval.Suite, error) {
	var pfs fs.FS = policies.FS
	if o.Policies != "" {
		pfs = os.DirFS(o.Policies)
	}
	bundle, err := vapeval.LoadBundle(pfs)
	if err != nil {
		return nil, fmt.Errorf("--policies %s: %w", o.Policies, err)
	}
	crd, err := vapeval.LoadCRDFS(config.CRDs, config.FenceConfigCRD)
	if err != nil {
		return nil, err
	}
	load := func(flag, file, shipped string) ([]*unstructured.Unstructured, error) {
		if file == "" {
			return vapeval.LoadObjectsFS(policies.FS, shipped)
		}
		objs, err := vapeval.LoadObjects(file)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", flag, file, err)
		}
		return objs, nil
	}
	cfgs, err := load("--config", o.Config, "testdata/fenceconfig.yaml")
	if err != nil {
		return nil, err
	}
	if len(cfgs) != 1 || cfgs[0].GetKind() != fencev1alpha1.Kind {
		return nil, fmt.Errorf("--config %s: want exactly one FenceConfig document, found %d documents", o.Config, len(cfgs))
	}
	nsObjs, err := load("--namespaces", o.Namespaces, "testdata/namespaces.yaml")
	if err != nil {
		return nil, err
	}
	nss, err := vapeval.NamespacesOf(nsObjs)
	if err != nil {
		return nil, fmt.Errorf("--namespaces %s: %w", o.Namespaces, err)
	}
	return &vapeval.Suite{Bundle: bundle, Defaults: cfgs[0], CRD: crd, Namespaces: nss}, nil
}

// String renders the results for a person: one line per case.
func (r *TestReport) String() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RESULT\tCASE\tVERDICT\tMESSAGE")
	for _, t := range r.Results {
		result, detail := "PASS", t.Message
		if !t.Pass {
			result, detail = "FAIL", strings.Join(t.Problems, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", result, t.File, t.Verdict, detail)
	}
	tw.Flush()
	fmt.Fprintf(&b, "\n%d passed, %d failed.\n", r.Passed, r.Failed)
	return b.String()
}
