package fencectl

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
)

// errFindings makes the process exit 1 without printing anything more:
// the report already said what was found.
var errFindings = errors.New("findings")

// ExitCode maps what a command returned to the plugin's exit code: 0
// clean, 1 findings or failed checks (already reported), 2 the command
// could not run (the error is printed to errOut).
func ExitCode(err error, errOut io.Writer) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errFindings):
		return 1
	}
	fmt.Fprintln(errOut, "error:", err)
	return 2
}

// QuietKlog keeps the in-process evaluator's informers from logging onto
// the report.
func QuietKlog() {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
}

// Streams are the command's standard input, output and error.
type Streams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

type root struct {
	streams Streams
	// flags are kubectl's own flags for the kubeconfig, context, namespace
	// and credentials (--kubeconfig, --context, -n, --server, --token, --as,
	// ...), from cli-runtime as every kubectl plugin has them.
	flags  *genericclioptions.ConfigFlags
	opts   Options
	output string
}

// NewCommand is `kubectl fence` with its three subcommands, using kubectl's
// flags for the kubeconfig, context, namespace and credentials.
func NewCommand(streams Streams) *cobra.Command {
	r := &root{streams: streams, flags: genericclioptions.NewConfigFlags(true)}
	cmd := &cobra.Command{
		Use:   "kubectl fence",
		Short: "Audit, inspect and check sandbox-fence on a cluster",
		Long: `kubectl fence reads the cluster with your credentials and writes nothing but audit --write's
policy reports; test reads no cluster.

  audit           what the installed fence would refuse among the existing Sandboxes
                  and per-sandbox CiliumNetworkPolicies (exit 1 on findings)
  status SANDBOX  one Sandbox's holder epoch, mode, changed-at and per-sandbox policy
  check           every piece of the installation, naming what is missing (exit 1 on failures)
  version         the plugin's build, the cluster's Kubernetes and the installed webhook's image
  test -f CASES   offline: the shipped policies' verdict on each case, against what it expects (exit 1 on a mismatch)`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	r.flags.AddFlags(cmd.PersistentFlags())
	cmd.PersistentFlags().StringVarP(&r.output, "output", "o", "table", "Output format: table, json, yaml, or a template as kubectl takes (jsonpath=..., go-template=...); audit also policyreport.")
	cmd.PersistentFlags().StringVar(&r.opts.ConfigName, "config-name", fencev1alpha1.DefaultConfigName, "Name of the FenceConfig the installation reads.")
	cmd.PersistentFlags().StringVar(&r.opts.PolicyPrefix, "policy-prefix", "", "The namePrefix the policies were installed with (docs/install.md, Rename the policies).")
	cmd.AddCommand(r.audit(), r.status(), r.check(), r.version(), r.test())
	return cmd
}

func (r *root) clients() (Clients, error) {
	cfg, err := r.flags.ToRESTConfig()
	if err != nil {
		return Clients{}, err
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Clients{}, err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return Clients{}, err
	}
	return Clients{Kube: kc, Dynamic: dc}, nil
}

func (r *root) audit() *cobra.Command {
	var all, write bool
	var selector string
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Report what the installed fence would refuse among existing objects (exit 1 on findings)",
		Long: `Evaluates every Sandbox and every per-sandbox CiliumNetworkPolicy (namzu-sbx-*) in
every namespace against the installed ValidatingAdmissionPolicies, with the API
server's own evaluator and the bindings taken as Deny whatever mode they run in,
and runs the webhook's owner checks on every per-sandbox policy. Findings:
malformed-annotation, oversized-annotation, orphan-finalizer, policy-not-admitted,
orphaned-policy, owner-label, namespace-not-opted-in, namespace-missing
(docs/kubectl-fence.md).

Every namespace is audited unless -n names one; -l narrows the Sandboxes and
per-sandbox policies audited to those whose labels match.

-o policyreport writes the findings as openreports.io/v1alpha1 Reports (one per
namespace, named sandbox-fence) and a ClusterReport, for kubectl apply; with
--write it applies them itself and deletes the stale ones, the one write the
plugin makes, and exits 0 once they are written, findings or not
(docs/kubectl-fence.md, Policy reports).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o := AuditOptions{Options: r.opts, Selector: selector}
			if cmd.Flags().Changed("namespace") {
				if all {
					return errors.New("-n and -A contradict each other: name one namespace, or audit all of them")
				}
				o.Namespace = *r.flags.Namespace
			}
			switch {
			case write && r.output != OutputPolicyReport:
				return errors.New("--write writes policy reports: add -o policyreport")
			case write && (o.Namespace != "" || o.Selector != ""):
				return errors.New("--write replaces the whole cluster's reports, deleting those it did not write: audit every object (drop -n and -l)")
			}
			c, err := r.clients()
			if err != nil {
				return err
			}
			rep, err := Audit(cmd.Context(), c, o)
			if err != nil {
				return err
			}
			switch {
			case write:
				written, deleted, werr := WriteReports(cmd.Context(), c, rep.PolicyReports(time.Now()))
				if werr != nil {
					return werr
				}
				// The reports hold the findings: a run that wrote them
				// succeeded, so a CronJob's Job fails only when it could not.
				_, err = fmt.Fprintf(r.streams.Out, "%d finding(s): wrote %d report(s), deleted %d stale\n", len(rep.Findings), written, deleted)
				return err
			case r.output == OutputPolicyReport:
				err = Print(r.streams.Out, "yaml", rep.PolicyReports(time.Now()), nil)
			default:
				err = Print(r.streams.Out, r.output, rep, rep.String)
			}
			if err != nil {
				return err
			}
			if len(rep.Findings) > 0 {
				return errFindings
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "Audit every namespace (the default unless -n names one).")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "Audit only the Sandboxes and per-sandbox policies whose labels match this selector (kubectl's syntax).")
	cmd.Flags().BoolVar(&write, "write", false, "With -o policyreport: apply the reports to the cluster (server-side) and delete the stale ones, instead of printing them; needs write access to reports and clusterreports.")
	return cmd
}

func (r *root) status() *cobra.Command {
	return &cobra.Command{
		Use:   "status SANDBOX",
		Short: "Show a Sandbox's holder epoch, operating mode, changed-at and per-sandbox policy",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := r.clients()
			if err != nil {
				return err
			}
			ns, _, err := r.flags.ToRawKubeConfigLoader().Namespace()
			if err != nil {
				return err
			}
			st, err := Status(cmd.Context(), c, r.opts, ns, args[0])
			if err != nil {
				return err
			}
			return Print(r.streams.Out, r.output, st, st.String)
		},
	}
}

func (r *root) check() *cobra.Command {
	o := CheckOptions{}
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Verify the installation and name what is missing or inconsistent (exit 1 on failures)",
		Long: `Checks the Kubernetes version, the CRDs, the policies and their bindings, the
enforcement mode of bindings and webhook, the FenceConfig, the opted-in namespaces,
and the webhook's configuration, CA bundle and endpoints.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := r.clients()
			if err != nil {
				return err
			}
			o.Options = r.opts
			rep, err := Check(cmd.Context(), c, o)
			if err != nil {
				return err
			}
			if err := Print(r.streams.Out, r.output, rep, rep.String); err != nil {
				return err
			}
			if rep.Failed() > 0 {
				return errFindings
			}
			return nil
		},
	}
	webhookFlags(cmd, &o)
	cmd.Flags().DurationVar(&o.DialTimeout, "dial-timeout", 5*time.Second, "Bound on the TLS handshake with a webhook reached by URL.")
	return cmd
}

// webhookFlags name the installed webhook, for check and version.
func webhookFlags(cmd *cobra.Command, o *CheckOptions) {
	cmd.Flags().StringVar(&o.WebhookConfig, "webhook-config", DefaultWebhookConfig, "Name of the ValidatingWebhookConfiguration (and of the webhook Deployment).")
	cmd.Flags().StringVar(&o.WebhookNamespace, "webhook-namespace", DefaultWebhookNamespace, "Namespace of the webhook Deployment.")
}

func (r *root) version() *cobra.Command {
	var clientOnly bool
	o := CheckOptions{}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version, the cluster's Kubernetes version and the installed webhook's image",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var cp *Clients
			if !clientOnly {
				c, err := r.clients()
				if err != nil {
					return err
				}
				cp = &c
			}
			rep, err := Version(cmd.Context(), cp, o)
			if err != nil {
				return err
			}
			return Print(r.streams.Out, r.output, rep, rep.String)
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "Print the plugin's version only, without reading the cluster.")
	webhookFlags(cmd, &o)
	return cmd
}

func (r *root) test() *cobra.Command {
	o := TestOptions{}
	cmd := &cobra.Command{
		Use:   "test -f CASES...",
		Short: "Evaluate cases against the shipped policies offline (exit 1 when a verdict is not the one expected)",
		Long: `Evaluates each case (a request: a host's policy body, a Sandbox patch applied to a stored
object, a FenceConfig write; the configuration it runs under; and the verdict it expects;
the format of policies/README.md) with the API server's own validating admission policy
plugin, against the policies this binary ships (or --policies DIR), and prints each
verdict with its message. Reads no cluster. Exit codes: 0 every verdict as expected,
1 a verdict is not, 2 the cases could not be run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := RunTests(cmd.Context(), o)
			if err != nil {
				return err
			}
			if err := Print(r.streams.Out, r.output, rep, rep.String); err != nil {
				return err
			}
			if rep.Failed > 0 {
				return errFindings
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVarP(&o.Files, "filename", "f", nil, "Case files, or directories of them (*.yaml); repeat or separate by commas.")
	cmd.Flags().StringVar(&o.Policies, "policies", "", "A directory of policies (<name>/policy.yaml and its binding) to test instead of the shipped ones.")
	cmd.Flags().StringVar(&o.Config, "config", "", "A file holding the FenceConfig the cases run under (default: the examples' of policies/testdata).")
	cmd.Flags().StringVar(&o.Namespaces, "namespaces", "", "A file of the cluster's Namespaces with their labels (default: the examples' of policies/testdata).")
	return cmd
}
