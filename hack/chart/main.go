// Command chart generates the Helm chart charts/sandbox-fence from config/,
// the one source of truth (make chart; docs/install.md, "Install with
// Helm"). It renders config/ with kustomize once per layer (config/vap,
// the webhook with either certificate source, each optional component),
// gives each object the condition of the layer that adds it, and puts
// values where config/ has its
// defaults: the release namespace (rendered through
// config/transformers/namespace, so every string that embeds it follows),
// the image, the replicas, the enforcement mode (internal/enforcement's
// table), the FenceConfig spec, and the pod-level overrides (podValues),
// rendered free-form with toYaml. Every object gets Helm's standard labels;
// selectors stay config/'s. The Namespace is not the chart's: Helm's release
// namespace is (helm install -n X --create-namespace).
//
//	go run . -root ../..                        # writes ../../charts/sandbox-fence
//	go run . -root ../.. -version 0.1.0 -image ghcr.io/o/w@sha256:... -package x.tgz
//
// TestChartIsCurrent fails when the committed chart differs from this
// output; TestChartRendersTheKustomizeBundle compares what Helm renders with
// what kustomize renders for every combination of the switches.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/sandbox-fence/sandbox-fence/hack/kustomize"
	"github.com/sandbox-fence/sandbox-fence/internal/enforcement"
	"github.com/sandbox-fence/sandbox-fence/internal/kubeversion"
)

// hooks is templates/hooks.yaml: the lifecycle steps Helm cannot order
// itself, as hook Jobs (internal/lifecycle); config/ has no equivalent.
//
//go:embed hooks.yaml
var hooks []byte

// Placeholders rendered in, then replaced by template actions.
const (
	nsSentinel       = "sfchartnamespace"
	imageSentinel    = "sfchartimage"
	imageTagSentinel = "sfcharttag"
	// The policy reports' image (kubectl fence's), and their schedule.
	reportsImageSentinel = "sfchartreportsimage"
	reportsTagSentinel   = "sfchartreportstag"
	scheduleSentinel     = "SF_CHART_REPORTS_SCHEDULE"
	replicasPH           = "SF_CHART_REPLICAS"
	priorityPH           = "SF_CHART_PRIORITY_CLASS"
	actionsPH            = "SF_CHART_VALIDATION_ACTIONS"
	failurePH            = "SF_CHART_FAILURE_POLICY"
	enforcementArgPH     = "SF_CHART_ENFORCEMENT_ARG"
	fenceSpecPH          = "SF_CHART_FENCECONFIG_SPEC"
	labelsPH             = "SF_CHART_LABELS"
	podLabelsPH          = "SF_CHART_POD_LABELS"
	valuePH              = "SF_CHART_VALUE_" // + the value's path: the field is .Values.<path> as YAML
)

// devImage and devReportsImage are the images config/ names (the
// webhook's, kubectl fence's for the policy reports).
const (
	devImage        = "sandbox-fence/webhook"
	devReportsImage = "sandbox-fence/kubectl-fence"
)

// podValues are the webhook pod's fields an admin overrides free-form,
// values key → field of the pod spec; the default is config/'s.
var podValues = []struct{ key, field string }{
	{"resources", ""}, // the container's
	{"nodeSelector", "nodeSelector"},
	{"tolerations", "tolerations"},
	{"affinity", "affinity"},
	{"topologySpreadConstraints", "topologySpreadConstraints"},
	{"imagePullSecrets", "imagePullSecrets"},
}

// A layer is one kustomization an admin writes (config/ as config/) and
// the Helm condition, a conjunction, of the objects it adds to config/vap.
// The two certificate sources are two versions of the webhook: an object
// both render alike needs .Values.webhook.enabled alone.
type layer struct {
	cond       []string
	resources  []string
	components []string
}

const webhookOn = ".Values.webhook.enabled"

func certIs(v string) string { return fmt.Sprintf("(eq .Values.webhook.certificates %q)", v) }

var layers = []layer{
	{nil, []string{"config/vap"}, nil},
	{[]string{webhookOn, certIs("cert-controller")}, []string{"config/vap", "config/webhook"}, nil},
	{[]string{webhookOn, certIs("cert-manager")}, []string{"config/vap", "config/webhook/overlays/cert-manager"}, nil},
	{[]string{".Values.strictDelete.enabled"}, []string{"config/vap"}, []string{"config/vap/components/strict-delete"}},
	{[]string{webhookOn, ".Values.networkPolicy.enabled"}, []string{"config/vap", "config/webhook"}, []string{"config/components/network-policy"}},
	// Monitoring reads the webhook's serving CA from cert-controller's
	// Secret; fenceConfigSpec refuses it with cert-manager or no webhook.
	{[]string{webhookOn, certIs("cert-controller"), ".Values.monitoring.enabled"}, []string{"config/vap", "config/webhook"}, []string{"config/components/monitoring"}},
	// The baseline: on by default wherever the API server serves Cilium's
	// clusterwide policies, asked of it at install.
	{[]string{"(and .Values.ciliumBaseline.enabled (.Capabilities.APIVersions.Has " + strconv.Quote(CiliumClusterwidePolicyAPI) + "))"},
		[]string{"config/vap"}, []string{"config/components/cilium-baseline"}},
	// The policy reports' CronJob, webhook or not. Rendered beside the
	// webhook, whose Service the namespace transformer reads the release
	// namespace from; the webhook's objects render as in the second layer.
	{[]string{".Values.policyReports.enabled"}, []string{"config/vap", "config/webhook"}, []string{"config/components/policy-reports"}},
}

// CiliumClusterwidePolicyAPI is what the chart asks the API server for
// before it installs the baseline.
const CiliumClusterwidePolicyAPI = "cilium.io/v2/CiliumClusterwideNetworkPolicy"

// Build renders kustomization k beside configDir (linked as config/).
func Build(configDir string, k map[string]any) ([]map[string]any, error) {
	m, err := kustomize.Build(configDir, k)
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	for _, r := range m.Resources() {
		// Map, not AsYAML: kustomize's YAML re-encodes folded scalars with
		// more-indented lines (the policies' CEL) in a form another YAML
		// library reads differently; the map holds the strings as kubectl
		// would send them.
		m, err := r.Map()
		if err != nil {
			return nil, err
		}
		j, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		var o map[string]any
		if err := json.Unmarshal(j, &o); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

type options struct {
	root, out, pkg, version, image, reportsImage string
}

func main() {
	var o options
	flag.StringVar(&o.root, "root", "../..", "Repository checkout.")
	flag.StringVar(&o.out, "out", "", "Chart directory to write (default <root>/charts/sandbox-fence).")
	flag.StringVar(&o.pkg, "package", "", "Write the chart as a Helm package (.tgz) here instead of a directory.")
	flag.StringVar(&o.version, "version", "0.0.0-dev", "Chart version and appVersion (SemVer, no v).")
	flag.StringVar(&o.image, "image", "", "Default image, repository@sha256:... or repository:tag (default: config/'s).")
	flag.StringVar(&o.reportsImage, "reports-image", "", "Default image of the policy reports' CronJob (kubectl fence's), as -image (default: config/'s).")
	flag.Parse()
	files, err := Generate(filepath.Join(o.root, "config"), o.version, o.image, o.reportsImage)
	if err == nil {
		if o.pkg != "" {
			err = writePackage(o.pkg, files)
		} else {
			if o.out == "" {
				o.out = filepath.Join(o.root, "charts", "sandbox-fence")
			}
			err = writeDir(o.out, files)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

// version of a generated object: its text, its condition, the layer that
// first rendered it.
type version struct {
	text  string
	cond  []string
	layer int
}

type object struct {
	key      string // kind/name
	kind     string
	versions []*version
}

// Generate returns the chart's files, path → content.
func Generate(configDir, chartVersion, image, reportsImage string) (map[string][]byte, error) {
	if _, err := strconv.Atoi(strings.SplitN(chartVersion, ".", 2)[0]); err != nil || strings.HasPrefix(chartVersion, "v") {
		return nil, fmt.Errorf("-version %q: want SemVer without v, e.g. 0.1.0", chartVersion)
	}
	images := []map[string]string{
		{"name": devImage, "newName": imageSentinel, "newTag": imageTagSentinel},
		{"name": devReportsImage, "newName": reportsImageSentinel, "newTag": reportsTagSentinel},
	}
	var objects []*object
	byKey := map[string]*object{}
	crds := map[string]map[string]any{}
	defaults := map[string]any{}
	for i, l := range layers {
		k := map[string]any{"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": l.resources, "images": images}
		if len(l.components) > 0 {
			k["components"] = l.components
		}
		if len(l.resources) > 1 { // the webhook's, in the namespace that becomes the release's
			k["namespace"], k["transformers"] = nsSentinel, []string{"config/transformers/namespace"}
		}
		objs, err := Build(configDir, k)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			kind, _ := o["kind"].(string)
			md, _ := o["metadata"].(map[string]any)
			name, _ := md["name"].(string)
			switch kind {
			case "Namespace":
				continue // the release namespace, Helm's (helm install -n X --create-namespace)
			case "CustomResourceDefinition":
				crds[name] = o
				continue
			}
			if err := templatize(o, defaults); err != nil {
				return nil, fmt.Errorf("%s/%s: %w", kind, name, err)
			}
			b, err := yaml.Marshal(o)
			if err != nil {
				return nil, err
			}
			text := string(b)
			key := kind + "/" + name
			obj := byKey[key]
			if obj == nil {
				obj = &object{key: key, kind: kind}
				byKey[key] = obj
				objects = append(objects, obj)
			}
			idx := slices.IndexFunc(obj.versions, func(v *version) bool { return v.text == text })
			switch {
			case idx >= 0 && i == 2 && obj.versions[idx].layer == 1: // both certificate sources alike
				obj.versions[idx].cond = []string{webhookOn}
			case idx >= 0: // an earlier layer's, unchanged
			case len(obj.versions) == 0 || i == 2 && obj.versions[0].layer == 1:
				obj.versions = append(obj.versions, &version{text: text, cond: l.cond, layer: i})
			default:
				return nil, fmt.Errorf("%s: %v renders it unlike %v, which no condition of the chart says", key, l, layers[obj.versions[0].layer])
			}
		}
	}

	files := map[string][]byte{}
	for i, o := range objects {
		var b strings.Builder
		b.WriteString("# Generated by hack/chart from config/ (make chart); do not edit.\n")
		for j, v := range o.versions {
			if j > 0 {
				b.WriteString("---\n")
			}
			text := fill(v.text, defaults["podLabelsKept"].(string))
			switch len(v.cond) {
			case 0:
				b.WriteString(text)
			default:
				expr := v.cond[0]
				if len(v.cond) > 1 {
					expr = "and " + strings.Join(v.cond, " ")
				}
				fmt.Fprintf(&b, "{{- if %s }}\n%s{{- end }}\n", expr, text)
			}
		}
		short := strings.TrimPrefix(strings.Split(o.key, "/")[1], "sandbox-fence-")
		name := fmt.Sprintf("templates/%02d-%s-%s.yaml", i, strings.ToLower(o.kind), short)
		files[name] = []byte(b.String())
	}
	for _, c := range crds {
		md := c["metadata"].(map[string]any)
		b, err := yaml.Marshal(c)
		if err != nil {
			return nil, err
		}
		// Helm installs crds/ untemplated: the default namespace stays in
		// the CRD's rule naming the webhook's ServiceAccount (docs/install.md).
		files["crds/"+md["name"].(string)+".yaml"] = append([]byte("# Generated by hack/chart from config/ (make chart); do not edit.\n"),
			bytes.ReplaceAll(b, []byte(nsSentinel), []byte("sandbox-fence-system"))...)
	}
	for name, b := range files {
		if strings.Contains(string(b), nsSentinel) && strings.HasPrefix(name, "crds/") {
			return nil, fmt.Errorf("%s: namespace placeholder left", name)
		}
	}

	repo, tag, digest, err := imageValues("-image", image, devImage, chartVersion)
	if err != nil {
		return nil, err
	}
	rrepo, rtag, rdigest, err := imageValues("-reports-image", reportsImage, devReportsImage, chartVersion)
	if err != nil {
		return nil, err
	}
	files["Chart.yaml"] = []byte(fmt.Sprintf(`# Generated by hack/chart from config/ (make chart); do not edit.
apiVersion: v2
name: sandbox-fence
description: Admission policies and a validating webhook that make the cluster enforce what agent-sandbox hosts fence client-side.
type: application
version: %s
appVersion: %q
home: https://github.com/sandbox-fence/sandbox-fence
sources:
- https://github.com/sandbox-fence/sandbox-fence
kubeVersion: ">=%s-0"
`, chartVersion, chartVersion, strings.TrimPrefix(kubeversion.Minimum, "v")))
	pod := ""
	for _, v := range podValues {
		pod += block(v.key, defaults[v.key])
	}
	files["values.yaml"] = []byte(fmt.Sprintf(`# Generated by hack/chart from config/ (make chart); do not edit.
# Each default is what kustomize build config/default installs.
# values.schema.json refuses a key not listed here and a value of the wrong type.

# The webhook (Deployment, Service, RBAC, certificates) goes in the release
# namespace: helm install -n sandbox-fence-system --create-namespace. Every
# reference follows it: the Service the webhook configuration calls, the
# webhook's ServiceAccount in its matchConditions and in the egress policy,
# the namespaceSelector exclusion, the certificate's names.

# The webhook image: repository@digest when digest is set, else repository:tag.
image:
  repository: %s
  tag: %s
  digest: %q

replicas: %v

# The webhook pods' PriorityClass (docs/webhook.md): evicted last, because
# while no replica answers every bound host's policy write is refused. ""
# leaves the cluster's default.
priorityClassName: %s

# The webhook pods, free-form (rendered with toYaml). resources is the
# container's; the rest are the pod spec's fields of the same name.
%s
# Added to the webhook pods' labels (not to the Deployment's selector, which
# is immutable: a label the selector holds is not overridden).
podLabels: {}
podAnnotations: {}

serviceAccount:
  # The webhook's ServiceAccount's annotations (e.g. a cloud IAM role).
  annotations: {}

# What a violation does (internal/enforcement): deny refuses it with a 422;
# warn admits it with the denial as a warning and an audit annotation; audit
# admits it with the audit annotation only.
enforcement: deny

webhook:
  # false: the ValidatingAdmissionPolicies alone (config/vap).
  enabled: true
  # cert-controller (built into the binary) or cert-manager (which must be
  # installed; config/webhook/overlays/cert-manager).
  certificates: cert-controller

# Strict delete: binds sandbox-fence-strict-delete and sets the FenceConfig's
# spec.strictDelete: a bound host's DELETE of a Sandbox holding an epoch, or
# of any claim, must then carry preconditions.resourceVersion, so a stale
# holder cannot delete a workspace its successor holds.
strictDelete:
  enabled: false

# The webhook pods' CiliumNetworkPolicy (config/components/network-policy;
# docs/webhook.md, Network policy): only the API server reaches the
# admission port, the cluster the metrics port, the host the probes. Needs
# Cilium, as the fence does.
networkPolicy:
  enabled: false

# Monitoring (config/components/monitoring; docs/webhook.md, Metrics): the
# metrics Service, a ServiceMonitor, the PrometheusRule of the alerts and the
# Grafana dashboard as a ConfigMap. Needs the Prometheus Operator's CRDs and
# the webhook with cert-controller's certificates (the ServiceMonitor checks
# the webhook against that Secret's CA); refused otherwise.
monitoring:
  enabled: false

# The baseline (config/components/cilium-baseline; docs/install.md, The
# baseline): every pod in an opted-in namespace reaches
# kube-dns and what its own per-sandbox policy allows, never link-local or
# metadata addresses. Installed only where the API server serves
# cilium.io/v2 CiliumClusterwideNetworkPolicy.
ciliumBaseline:
  enabled: true

# The FenceConfig CRD, which Helm installs from crds/ and never changes.
# upgrade: a pre-upgrade hook applies the new chart's CRD, so a new field is
# known before the new webhook reads it. keep: false deletes the CRD, and
# with it every FenceConfig, after helm uninstall.
crds:
  upgrade: true
  keep: true

# The FenceConfig spec: hosts, break-glass identities, ... (docs/install.md,
# Configure). Empty: fences nobody.
fenceConfig: {}

# Policy reports (config/components/policy-reports; docs/kubectl-fence.md,
# Policy reports): a CronJob that runs kubectl fence audit -o policyreport
# --write on schedule, as a ServiceAccount that reads what the plugin's
# read-only role reads and writes openreports.io reports only. Needs
# openreports.io's CRDs (Kyverno and Policy Reporter install them).
policyReports:
  enabled: false
  schedule: %q
  # kubectl fence's image: repository@digest when digest is set, else
  # repository:tag. Pulled with imagePullSecrets, as the webhook's.
  image:
    repository: %s
    tag: %s
    digest: %q
`, repo, tag, digest, defaults["replicas"], defaults["priorityClassName"], pod, defaults["schedule"], rrepo, rtag, rdigest))
	schema, err := valuesSchema()
	if err != nil {
		return nil, err
	}
	files["values.schema.json"] = schema
	files["templates/_helpers.tpl"] = []byte(helpers())
	files["templates/hooks.yaml"] = append([]byte("{{/* Copied by hack/chart from hack/chart/hooks.yaml (make chart); edit that file. */}}\n"), hooks...)
	files[".helmignore"] = []byte("# Generated by hack/chart from config/ (make chart); do not edit.\n*.go\n")
	return files, nil
}

// templatize puts placeholders where values go: the replicas, the mode's
// fields (the objects config/components/enforcement patches), the
// FenceConfig spec, the pod's overrides, the labels. defaults collects
// config/'s value of each, which must be the same in every combo.
func templatize(o map[string]any, defaults map[string]any) error {
	kind, _ := o["kind"].(string)
	md, _ := o["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	labels, _ := md["labels"].(map[string]any)
	ours := labels["app.kubernetes.io/name"] == "sandbox-fence"
	spec, _ := o["spec"].(map[string]any)
	setDefault := func(key string, v any) error {
		if have, ok := defaults[key]; ok && !reflect.DeepEqual(have, v) {
			return fmt.Errorf("%s: %v in one combination, %v in another", key, have, v)
		}
		defaults[key] = v
		return nil
	}
	switch {
	case kind == "ValidatingAdmissionPolicyBinding" && ours:
		spec["validationActions"] = actionsPH
	case kind == "ValidatingAdmissionPolicy" && ours:
		if spec["failurePolicy"] == "Fail" {
			spec["failurePolicy"] = failurePH
		}
	case kind == "ValidatingWebhookConfiguration" && name == "sandbox-fence-webhook":
		hooks, _ := o["webhooks"].([]any)
		for _, h := range hooks {
			if hm, _ := h.(map[string]any); hm["failurePolicy"] == "Fail" {
				hm["failurePolicy"] = failurePH
			}
		}
	case kind == "ServiceAccount" && name == "sandbox-fence-webhook":
		if md["annotations"] != nil {
			return fmt.Errorf("config/ annotates it: make the annotations serviceAccount.annotations' default")
		}
		md["annotations"] = valuePH + "serviceAccount.annotations"
	case kind == "Deployment" && name == "sandbox-fence-webhook":
		if err := setDefault("replicas", spec["replicas"]); err != nil {
			return err
		}
		spec["replicas"] = replicasPH
		tm := spec["template"].(map[string]any)["metadata"].(map[string]any)
		tl := tm["labels"].(map[string]any)
		var keep []string // the pod's own labels: podLabels never override them
		for k := range tl {
			keep = append(keep, strconv.Quote(k))
		}
		sort.Strings(keep)
		defaults["podLabelsKept"] = strings.Join(keep, " ")
		tl[labelsPH], tl[podLabelsPH] = "x", "x"
		if tm["annotations"] != nil {
			return fmt.Errorf("config/ annotates its pods: make the annotations podAnnotations' default")
		}
		tm["annotations"] = valuePH + "podAnnotations"
		tmpl := spec["template"].(map[string]any)["spec"].(map[string]any)
		if err := setDefault("priorityClassName", tmpl["priorityClassName"]); err != nil {
			return err
		}
		tmpl["priorityClassName"] = priorityPH
		c := tmpl["containers"].([]any)[0].(map[string]any)
		c["args"] = append(c["args"].([]any), enforcementArgPH)
		for _, v := range podValues {
			m := tmpl
			field := v.field
			if field == "" {
				m, field = c, v.key
			}
			if err := setDefault(v.key, m[field]); err != nil {
				return err
			}
			m[field] = valuePH + v.key
		}
	case kind == "FenceConfig":
		o["spec"] = fenceSpecPH
	case kind == "CronJob" && name == "sandbox-fence-reports":
		if err := setDefault("schedule", spec["schedule"]); err != nil {
			return err
		}
		spec["schedule"] = scheduleSentinel
		// The webhook's pull secrets: a release's two images come from one
		// registry.
		pod := spec["jobTemplate"].(map[string]any)["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		if err := setDefault("imagePullSecrets", pod["imagePullSecrets"]); err != nil {
			return err
		}
		pod["imagePullSecrets"] = valuePH + "imagePullSecrets"
	}
	// Helm's standard labels on every object, after config/'s: a webhook
	// object without a name label gets the Deployment's.
	if labels == nil {
		labels = map[string]any{}
		md["labels"] = labels
	}
	if labels["app.kubernetes.io/name"] == nil {
		labels["app.kubernetes.io/name"] = "sandbox-fence"
		if labels["app.kubernetes.io/component"] == "webhook" || md["namespace"] != nil {
			labels["app.kubernetes.io/name"] = "sandbox-fence-webhook"
		}
	}
	labels[labelsPH] = "x"
	return nil
}

// block is key: and value v in values.yaml.
func block(key string, v any) string {
	switch x := v.(type) {
	case nil:
		if key == "affinity" || key == "nodeSelector" || key == "resources" {
			return key + ": {}\n"
		}
		return key + ": []\n"
	default:
		b, err := yaml.Marshal(x)
		if err != nil {
			panic(err)
		}
		return key + ":\n" + regexp.MustCompile(`(?m)^`).ReplaceAllString(strings.TrimSuffix(string(b), "\n"), "  ") + "\n"
	}
}

var (
	argLine    = regexp.MustCompile(`(?m)^( *)- ` + enforcementArgPH + `\n`)
	labelsLine = regexp.MustCompile(`(?m)^( *)` + labelsPH + `: x\n`)
	podLine    = regexp.MustCompile(`(?m)^( *)` + podLabelsPH + `: x\n`)
	valueLine  = regexp.MustCompile(`(?m)^( *)([A-Za-z]+): ` + valuePH + `([A-Za-z.]+)\n`)
)

// templateBraces are the delimiters of a template action.
var templateBraces = regexp.MustCompile(`\{\{|\}\}`)

// fill replaces the placeholders with template actions, after quoting the
// braces config/ itself holds (the alerts' Prometheus templates), so Helm
// writes them as they are.
func fill(text, podLabelsKept string) string {
	text = templateBraces.ReplaceAllStringFunc(text, func(b string) string { return `{{"` + b + `"}}` })
	text = argLine.ReplaceAllString(text, "$1{{- if ne .Values.enforcement \"deny\" }}\n$1- --enforcement={{ .Values.enforcement }}\n$1{{- end }}\n")
	text = labelsLine.ReplaceAllStringFunc(text, func(l string) string {
		ind := labelsLine.FindStringSubmatch(l)[1]
		return fmt.Sprintf("%s{{- include \"sandbox-fence.labels\" . | nindent %d }}\n", ind, len(ind))
	})
	text = podLine.ReplaceAllStringFunc(text, func(l string) string {
		ind := podLine.FindStringSubmatch(l)[1]
		return fmt.Sprintf("%s{{- with omit .Values.podLabels %s %s }}\n%s{{- toYaml . | nindent %d }}\n%s{{- end }}\n",
			ind, podLabelsKept, stdLabels, ind, len(ind), ind)
	})
	text = valueLine.ReplaceAllStringFunc(text, func(l string) string {
		m := valueLine.FindStringSubmatch(l)
		ind, key, path := m[1], m[2], m[3]
		return fmt.Sprintf("%s{{- with .Values.%s }}\n%s%s:\n%s  {{- toYaml . | nindent %d }}\n%s{{- end }}\n",
			ind, path, ind, key, ind, len(ind)+2, ind)
	})
	r := strings.NewReplacer(
		nsSentinel, `{{ .Release.Namespace }}`,
		imageSentinel+":"+imageTagSentinel, `{{ include "sandbox-fence.image" .Values.image }}`,
		reportsImageSentinel+":"+reportsTagSentinel, `{{ include "sandbox-fence.image" .Values.policyReports.image }}`,
		scheduleSentinel, `{{ .Values.policyReports.schedule | quote }}`,
		replicasPH, `{{ .Values.replicas }}`,
		priorityPH, `{{ .Values.priorityClassName | quote }}`,
		actionsPH, `{{ include "sandbox-fence.validationActions" . }}`,
		failurePH, `{{ include "sandbox-fence.failurePolicy" . }}`,
		fenceSpecPH, `{{ include "sandbox-fence.fenceConfigSpec" . }}`,
	)
	return r.Replace(text)
}

// stdLabels are the keys sandbox-fence.labels writes, quoted.
const stdLabels = `"helm.sh/chart" "app.kubernetes.io/instance" "app.kubernetes.io/version" "app.kubernetes.io/managed-by"`

// helpers is _helpers.tpl: the mode's fields come from internal/enforcement.
func helpers() string {
	var acts, fps strings.Builder
	for i, m := range enforcement.Modes {
		kw := "else if"
		if i == 0 {
			kw = "if"
		}
		var as []string
		for _, a := range m.ValidationActions() {
			as = append(as, string(a))
		}
		fmt.Fprintf(&acts, "{{- %s eq .Values.enforcement %q }}[%s]\n", kw, m, strings.Join(as, ", "))
		fmt.Fprintf(&fps, "{{- %s eq .Values.enforcement %q }}%s\n", kw, m, m.FailurePolicy("Fail"))
	}
	var names []string
	for _, m := range enforcement.Modes {
		names = append(names, string(m))
	}
	bad := fmt.Sprintf(`{{- else }}{{ fail (printf "values: enforcement %%q: must be %s" .Values.enforcement) }}
{{- end }}`, strings.Join(names, ", "))
	return `{{/* Generated by hack/chart from config/ (make chart); do not edit. */}}

{{/* Helm's standard labels, beside config/'s on every object; never in a selector. */}}
{{- define "sandbox-fence.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | replace "+" "_" | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end }}

{{/* An image reference from its values (.Values.image, .Values.policyReports.image). */}}
{{- define "sandbox-fence.image" -}}
{{- if .digest }}{{ .repository }}@{{ .digest }}{{ else }}{{ .repository }}:{{ .tag }}{{ end -}}
{{- end }}

{{/* Every binding's validationActions in the mode (internal/enforcement). */}}
{{- define "sandbox-fence.validationActions" -}}
` + acts.String() + bad + `
{{- end }}

{{/* failurePolicy of what fails closed in deny: observing modes never refuse. */}}
{{- define "sandbox-fence.failurePolicy" -}}
` + fps.String() + bad + `
{{- end }}

{{- define "sandbox-fence.fenceConfigSpec" -}}
{{- if not (has .Values.webhook.certificates (list "cert-controller" "cert-manager")) }}{{ fail (printf "values: webhook.certificates %q: must be cert-controller or cert-manager" .Values.webhook.certificates) }}{{ end -}}
{{- if and .Values.monitoring.enabled (not (and .Values.webhook.enabled (eq .Values.webhook.certificates "cert-controller"))) }}{{ fail "values: monitoring.enabled needs webhook.enabled with webhook.certificates cert-controller: the ServiceMonitor verifies the webhook with that Secret's CA (docs/install.md, Install with Helm)" }}{{ end -}}
{{- $spec := deepCopy (.Values.fenceConfig | default dict) -}}
{{- if .Values.strictDelete.enabled }}{{ $_ := set $spec "strictDelete" true }}{{ end -}}
{{- toJson $spec -}}
{{- end }}
`
}

// valuesSchema is values.schema.json: every key values.yaml lists, with its
// type; any other key is refused (draft-07, which Helm validates against).
func valuesSchema() ([]byte, error) {
	obj := func(props map[string]any) map[string]any {
		return map[string]any{"type": "object", "additionalProperties": false, "properties": props}
	}
	str := map[string]any{"type": "string"}
	boolean := map[string]any{"type": "boolean"}
	strMap := map[string]any{"type": "object", "additionalProperties": str}
	anyObj := map[string]any{"type": "object"}
	anyList := map[string]any{"type": "array", "items": anyObj}
	image := obj(map[string]any{"repository": map[string]any{"type": "string", "minLength": 1}, "tag": str, "digest": str})
	var modes []string
	for _, m := range enforcement.Modes {
		modes = append(modes, string(m))
	}
	props := map[string]any{
		// global: what a parent chart passes every subchart.
		"global":                    anyObj,
		"image":                     image,
		"replicas":                  map[string]any{"type": "integer", "minimum": 0},
		"priorityClassName":         str,
		"resources":                 obj(map[string]any{"limits": anyObj, "requests": anyObj, "claims": anyList}),
		"nodeSelector":              strMap,
		"tolerations":               anyList,
		"affinity":                  anyObj,
		"topologySpreadConstraints": anyList,
		"imagePullSecrets":          map[string]any{"type": "array", "items": obj(map[string]any{"name": str})},
		"podLabels":                 strMap,
		"podAnnotations":            strMap,
		"serviceAccount":            obj(map[string]any{"annotations": strMap}),
		"enforcement":               map[string]any{"type": "string", "enum": modes},
		"webhook":                   obj(map[string]any{"enabled": boolean, "certificates": map[string]any{"type": "string", "enum": []string{"cert-controller", "cert-manager"}}}),
		"strictDelete":              obj(map[string]any{"enabled": boolean}),
		"networkPolicy":             obj(map[string]any{"enabled": boolean}),
		"monitoring":                obj(map[string]any{"enabled": boolean}),
		"ciliumBaseline":            obj(map[string]any{"enabled": boolean}),
		"crds":                      obj(map[string]any{"upgrade": boolean, "keep": boolean}),
		"fenceConfig":               anyObj,
		"policyReports":             obj(map[string]any{"enabled": boolean, "schedule": map[string]any{"type": "string", "minLength": 1}, "image": image}),
	}
	s := obj(props)
	s["$schema"] = "http://json-schema.org/draft-07/schema#"
	b, err := json.MarshalIndent(s, "", "  ")
	return append(b, '\n'), err
}

func writeDir(dir string, files map[string][]byte) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writePackage writes what `helm package` would, reproducibly: entries under
// sandbox-fence/ in name order, mtime SOURCE_DATE_EPOCH (else 0).
func writePackage(out string, files map[string][]byte) error {
	mtime := time.Unix(0, 0).UTC()
	if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", v, err)
		}
		mtime = time.Unix(n, 0).UTC()
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	zw.ModTime = mtime
	tw := tar.NewWriter(zw)
	for _, n := range names {
		b := files[n]
		if err := tw.WriteHeader(&tar.Header{Name: "sandbox-fence/" + n, Mode: 0o644, Size: int64(len(b)), ModTime: mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}

// imageValues are the image values of ref (repository@sha256:... or
// repository:tag); "" is config/'s name with the tag dev. A digest's tag is
// the chart version, shown but not pulled.
func imageValues(flag, ref, devRepo, chartVersion string) (repo, tag, digest string, err error) {
	if ref == "" {
		return devRepo, "dev", "", nil
	}
	if r, d, ok := strings.Cut(ref, "@"); ok {
		return r, chartVersion, d, nil
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[:i], ref[i+1:], "", nil
	}
	return "", "", "", fmt.Errorf("%s %q: want repository@sha256:... or repository:tag", flag, ref)
}
