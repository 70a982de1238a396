package fencectl

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/yaml"
)

// Output formats of every command (-o), besides kubectl's template
// formats: jsonpath=, jsonpath-file=, jsonpath-as-json=, go-template=,
// go-template-file=, template= and templatefile=.
var Outputs = []string{"table", "json", "yaml"}

// OutputPolicyReport is audit's -o for its findings as policy reports
// (AuditReport.PolicyReports).
const OutputPolicyReport = "policyreport"

// Print writes v as JSON or YAML, as text for a person ("table"), or
// through the printer kubectl itself uses for a template format
// (-o jsonpath='{.findings[*].name}'), over v's JSON.
func Print(w io.Writer, format string, v any, text func() string) error {
	switch format {
	case "", "table":
		_, err := io.WriteString(w, text())
		return err
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	p, err := genericclioptions.NewKubeTemplatePrintFlags().ToPrinter(format)
	if genericclioptions.IsNoCompatiblePrinterError(err) {
		return fmt.Errorf("-o %q: must be one of %s, or a template format as kubectl takes (jsonpath=..., go-template=...)", format, strings.Join(Outputs, ", "))
	}
	if err != nil {
		return fmt.Errorf("-o %q: %w", format, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(b, &u.Object); err != nil {
		return err
	}
	return p.PrintObj(u, w)
}

// String renders the audit for a person: one line per finding.
func (r *AuditReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Audited %d Sandboxes and %d per-sandbox CiliumNetworkPolicies against %s (enforcement: %s).\n",
		r.Sandboxes, r.PerSandboxPolicies, strings.Join(r.Policies, ", "), r.Enforcement)
	if len(r.Findings) == 0 {
		b.WriteString("No findings: the fence would admit every one of them today.\n")
		return b.String()
	}
	fmt.Fprintf(&b, "%d finding(s):\n\n", len(r.Findings))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAMESPACE\tNAME\tCHECK\tBY\tMESSAGE")
	for _, f := range r.Findings {
		ns := f.Namespace
		if ns == "" {
			ns = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Kind, ns, f.Name, f.Check, f.By, f.Message)
	}
	tw.Flush()
	return b.String()
}
