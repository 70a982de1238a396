package policies_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"text/tabwriter"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/policyconfig"
	"github.com/sandbox-fence/sandbox-fence/internal/vapeval"
)

// costBudget is the most one program may cost on any input: 1% of the API
// server's per-call limit, so the policies stay cheap at any request size.
const costBudget = vapeval.PerCallLimit / 100

// egressTransitiveBudget is the most one expression of the egress policy may
// cost with every variable it triggers: 3% of the per-call limit, the price
// accepted for checks written once, each problem list their single
// definition. The worst is the egress-port-problems annotation, 17,779
// units (1.78%), on 64 short names all refused.
const egressTransitiveBudget = 3 * vapeval.PerCallLimit / 100

type costInput struct {
	name   string
	req    vapeval.Request
	config policyconfig.Config
}

// TestCELCost evaluates every expression of every policy, compiled exactly
// as the plugin compiles it, on every case and on adversarial requests sized
// at (and beyond) the policies' own bounds, and fails when any program costs
// more than 1% of the per-call limit, or any expression of the egress policy
// more than 3% with the variables it triggers. It prints the worst cost of
// each.
//
// The per-call limit holds each program to its own cost: the API server
// evaluates each variable as a program of its own, with its own limit, and
// charges the runtime budget for it separately (variableAccessor.Callback
// in k8s.io/apiserver's plugin/cel/composition.go). So the bound is on
// each expression's own cost (vapeval.Expression.OwnCost), and the table
// also prints its transitive cost (with every variable it triggers, each
// once) and the worst request, all passes. The own costs are checked
// against the plugin's own accounting: on every input, each pass costs the
// sum of the own costs of its expressions and of the variables it
// evaluated.
//
// It measures runtime cost rather than trusting CEL's static estimate: the
// estimator ignores the size guards (x.size() <= N && ...) that bound the
// cost, so over the unbounded strings and lists of ObjectMeta and Cilium's
// schema it reports the request-size worst case for nearly every expression.
// The adversarial inputs below are what makes this a worst case.
//
// It also requires that an expression never errors where the plugin would
// evaluate it, and that a messageExpression, evaluated where its validation
// fails, yields a string with the family prefix: an erroring
// messageExpression silently falls back to the static message.
func TestCELCost(t *testing.T) {
	inputs := caseInputs(t)
	inputs = append(inputs, adversarialInputs(t)...)
	inputs = append(inputs, nullShapes(inputs)...)
	nss := map[string]*corev1.Namespace{}
	for _, ns := range namespaces(t) {
		nss[ns.Name] = ns
	}
	pct := func(c int64) string { return fmt.Sprintf("%.3f%%", 100*float64(c)/float64(vapeval.PerCallLimit)) }
	type worst struct {
		cost  int64
		input string
	}
	raise := func(w *worst, cost int64, input string) {
		if cost > w.cost {
			*w = worst{cost, input}
		}
	}
	var worstTransitive, worstRequest worst
	var worstTransitiveField, worstRequestPolicy string
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\texpression\town cost (per call)\t%% of per-call limit\tworst input\ttransitive\tworst input\t\n")
	for _, shipped := range loadBundle(t) {
		// The expressions as the controller renders them for each
		// configuration the inputs ask for; the fields are the same in
		// every rendering, so the worst costs add up per field.
		type compiled struct {
			exprs  []*vapeval.Expression
			passes []*vapeval.Pass
			plugin *vapeval.Passes
		}
		renderings := map[string]*compiled{}
		compile := func(c policyconfig.Config) *compiled {
			if r, ok := renderings[c.Expression()]; ok {
				return r
			}
			pol := policyconfig.Render(shipped.Policy, c)
			exprs, err := vapeval.CompileExpressions(pol)
			if err != nil {
				t.Fatal(err)
			}
			passes, err := vapeval.CompilePassReads(pol)
			if err != nil {
				t.Fatal(err)
			}
			plugin, err := vapeval.CompilePasses(pol)
			if err != nil {
				t.Fatal(err)
			}
			r := &compiled{exprs, passes, plugin}
			renderings[c.Expression()] = r
			return r
		}
		p := shipped
		exprs := compile(policyconfig.Config{State: policyconfig.Unrendered}).exprs
		own := make([]worst, len(exprs))
		transitive := make([]worst, len(exprs))
		byField := map[string]int{}
		var variables []int
		for i, e := range exprs {
			byField[e.Field] = i
			if e.Kind == "variable" {
				variables = append(variables, i)
			}
		}
		evaluated := 0
		for _, in := range inputs {
			if !matches(p.Policy, in.req) {
				continue
			}
			r := compile(in.config)
			exprs, passes, plugin := r.exprs, r.passes, r.plugin
			prepared, err := vapeval.NewInput(in.req, nil, nss[in.req.Namespace])
			if err != nil {
				t.Fatalf("%s: %v", in.name, err)
			}
			ctx := context.Background()
			owns := map[int]int64{}
			evaluate := func(i int) vapeval.Evaluation {
				e := exprs[i]
				ev := e.EvaluateInput(ctx, prepared)
				raise(&transitive[i], ev.Cost, in.name)
				o, err := e.OwnCost(ctx, prepared)
				if err != nil {
					t.Fatalf("%s %s on %s: %v", p.Policy.Name, e.Field, in.name, err)
				}
				owns[i] = o
				raise(&own[i], o, in.name)
				return ev
			}
			matched := true
			for i, e := range exprs {
				if e.Kind != "matchCondition" {
					continue
				}
				ev := evaluate(i)
				if ev.Err != nil {
					t.Errorf("%s %s on %s: %v", p.Policy.Name, e.Field, in.name, ev.Err)
				}
				matched = matched && ev.Value == true
			}
			if matched {
				evaluated++
				failed := map[int]bool{}
				for i, e := range exprs {
					if e.Kind != "variable" && e.Kind != "validation" && e.Kind != "auditAnnotation" {
						continue
					}
					ev := evaluate(i)
					if ev.Err != nil {
						t.Errorf("%s %s errors on %s: %v", p.Policy.Name, e.Field, in.name, ev.Err)
					}
					if e.Kind == "validation" && ev.Value == false {
						failed[e.Validation] = true
					}
					// An annotation the API server cannot evaluate is an error
					// under failurePolicy Fail: it must always give a string.
					if _, ok := ev.Value.(string); e.Kind == "auditAnnotation" && ev.Err == nil && !ok {
						t.Errorf("%s %s on %s = %#v, want a string", p.Policy.Name, e.Field, in.name, ev.Value)
					}
				}
				// The plugin evaluates every messageExpression, also where
				// its validation passed; only a failed one's is read.
				for i, e := range exprs {
					if e.Kind != "messageExpression" {
						continue
					}
					ev := evaluate(i)
					if !failed[e.Validation] {
						continue
					}
					msg, ok := ev.Value.(string)
					switch {
					case ev.Err != nil:
						t.Errorf("%s %s errors on %s, so the static message would be used: %v", p.Policy.Name, e.Field, in.name, ev.Err)
					case !ok || !(strings.HasPrefix(msg, "holder-epoch: ") || strings.HasPrefix(msg, "cilium-fence: ")):
						t.Errorf("%s %s on %s = %#v, want a string starting holder-epoch: or cilium-fence:", p.Policy.Name, e.Field, in.name, ev.Value)
					}
				}
			}
			// Each pass the plugin runs costs the own costs of its
			// expressions and of the variables it evaluated.
			charged, err := plugin.Cost(ctx, prepared)
			if err != nil {
				t.Fatalf("%s on %s: %v", p.Policy.Name, in.name, err)
			}
			want := map[string]int64{"matchConditions": charged.MatchConditions, "validations": charged.Validations,
				"messageExpressions": charged.Messages, "auditAnnotations": charged.AuditAnnotations}
			for _, pass := range passes {
				if pass.Name != "matchConditions" && !matched {
					continue
				}
				total, read, err := pass.Run(ctx, prepared)
				if err != nil {
					t.Fatalf("%s %s on %s: %v", p.Policy.Name, pass.Name, in.name, err)
				}
				var sum int64
				for _, f := range pass.Fields {
					sum += owns[byField[f]]
				}
				for j, r := range read {
					if r {
						o, err := exprs[variables[j]].OwnCost(ctx, prepared)
						if err != nil {
							t.Fatal(err)
						}
						sum += o
					}
				}
				if sum != total || total != want[pass.Name] {
					t.Errorf("%s %s on %s: own costs add up to %d, the pass costs %d (plugin passes: %d)",
						p.Policy.Name, pass.Name, in.name, sum, total, want[pass.Name])
				}
			}
			if c := charged.Total(); c > worstRequest.cost {
				worstRequest, worstRequestPolicy = worst{c, in.name}, p.Policy.Name
			}
		}
		if evaluated == 0 {
			t.Errorf("%s: no input reached its validations; the cost table would prove nothing", p.Policy.Name)
		}
		for i, e := range exprs {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\t\n", p.Policy.Name, e.Field, own[i].cost, pct(own[i].cost), own[i].input,
				transitive[i].cost, transitive[i].input)
			if own[i].cost > costBudget {
				t.Errorf("%s %s costs %d on %s, above 1%% of the per-call limit (%d)", p.Policy.Name, e.Field, own[i].cost, own[i].input, costBudget)
			}
			if p.Policy.Name == "sandbox-fence-cilium-egress" && transitive[i].cost > egressTransitiveBudget {
				t.Errorf("%s %s costs %d with its variables on %s, above 3%% of the per-call limit (%d)",
					p.Policy.Name, e.Field, transitive[i].cost, transitive[i].input, egressTransitiveBudget)
			}
			if transitive[i].cost > worstTransitive.cost {
				worstTransitive, worstTransitiveField = transitive[i], p.Policy.Name+" "+e.Field
			}
		}
	}
	if testing.Verbose() {
		tw.Flush()
		fmt.Printf("worst transitive cost of one expression: %d (%s of the per-call limit), %s on %s\n",
			worstTransitive.cost, pct(worstTransitive.cost), worstTransitiveField, worstTransitive.input)
		fmt.Printf("worst request, all passes: %d, %s on %s\n", worstRequest.cost, worstRequestPolicy, worstRequest.input)
	}
}

// matches reports whether the policy's resource rules select the request.
func matches(p *admissionregistrationv1.ValidatingAdmissionPolicy, r vapeval.Request) bool {
	if r.SubResource != "" {
		return false
	}
	for _, rule := range p.Spec.MatchConstraints.ResourceRules {
		if contains(rule.APIGroups, r.Resource.Group) && contains(rule.Resources, r.Resource.Resource) &&
			contains(rule.APIVersions, r.Resource.Version) && containsOp(rule.Operations, r.Operation) {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s || x == "*" {
			return true
		}
	}
	return false
}

func containsOp(list []admissionregistrationv1.OperationType, op admission.Operation) bool {
	for _, x := range list {
		if string(x) == string(op) || x == admissionregistrationv1.OperationAll {
			return true
		}
	}
	return false
}

func caseInputs(t *testing.T) []costInput {
	t.Helper()
	def := defaultParams(t)
	var out []costInput
	for _, dir := range policyDirs(t) {
		cases, err := vapeval.LoadCases(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			req, err := c.Request.BuildRequest()
			if err != nil {
				t.Fatalf("%s: %v", c.File, err)
			}
			out = append(out, costInput{name: dir + "/" + c.Name(), req: req, config: caseConfig(t, def, c.Params)})
		}
	}
	return out
}

// adversarialInputs are requests sized to make each expression as expensive
// as its guards allow, and beyond them.
func adversarialInputs(t *testing.T) []costInput {
	t.Helper()
	def := caseConfig(t, defaultParams(t), vapeval.CaseParams{})
	big := strings.Repeat("9", 1<<20)
	var out []costInput
	sandbox := func(anns map[string]string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
			"metadata": map[string]any{"name": "ws", "namespace": "sbx"}, "spec": map[string]any{"podTemplate": map[string]any{"spec": map[string]any{}}}}}
		u.SetAnnotations(anns)
		return u
	}
	many := map[string]string{}
	for i := range 5000 {
		many[fmt.Sprintf("example.com/a%d", i)] = big[:64]
	}
	for _, anns := range []struct {
		name     string
		old, new map[string]string
	}{
		{"megabyte epoch", map[string]string{epochKey: "1"}, map[string]string{epochKey: big}},
		{"megabyte stored epoch", map[string]string{epochKey: big}, map[string]string{epochKey: "1"}},
		{"megabyte stored and new epochs", map[string]string{epochKey: big}, map[string]string{epochKey: big + "0"}},
		{"megabyte epoch and hash carried unchanged", map[string]string{epochKey: big, hashKey: big}, map[string]string{epochKey: big, hashKey: big}},
		{"megabyte hash rewritten at the same length", map[string]string{hashKey: big}, map[string]string{hashKey: big[1:] + "8"}},
		{"megabyte changed-at and hash", nil, map[string]string{changedAtKey: big, hashKey: big}},
		{"megabyte well-formed-looking changed-at", nil, map[string]string{changedAtKey: "2026-08-01T09:00:00." + big + "Z"}},
		{"5000 other annotations", many, withKey(many, epochKey, "3")},
	} {
		for _, u := range []string{hostUser, "alice@example.com"} {
			out = append(out, costInput{name: "sandbox: " + anns.name + " by " + u, config: def, req: vapeval.Request{
				Operation: admission.Update, Kind: sandboxGVK, Resource: resourceOf(t, sandboxGVK), Namespace: "sbx", Name: "ws",
				Object: sandbox(anns.new), OldObject: sandbox(anns.old), User: &user.DefaultInfo{Name: u, Groups: manyGroups()}}})
		}
	}
	// Finalizer lists are unbounded in the schema; the orphan rule scans
	// at most 64 entries.
	var finalizers []any
	for i := range 5000 {
		finalizers = append(finalizers, fmt.Sprintf("example.com/%s-%d", strings.Repeat("f", 200), i))
	}
	claim := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
		"metadata": map[string]any{"name": "c", "namespace": "sbx", "finalizers": finalizers}, "spec": map[string]any{"warmPoolRef": map[string]any{"name": "p"}}}}
	claimGVK := schema.GroupVersionKind{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Kind: "SandboxClaim"}
	for _, op := range []admission.Operation{admission.Create, admission.Update, admission.Delete} {
		req := vapeval.Request{Operation: op, Kind: claimGVK, Resource: resourceOf(t, claimGVK), Namespace: "sbx", Name: "c",
			User: &user.DefaultInfo{Name: hostUser, Groups: manyGroups()}}
		if op != admission.Create {
			req.OldObject = claim
		}
		if op != admission.Delete {
			req.Object = claim
		}
		out = append(out, costInput{name: "claim with 5000 finalizers: " + string(op), config: def, req: req})
	}
	for _, w := range worstPolicies() {
		out = append(out, costInput{name: "cnp: " + w.name, config: bigConfig(t), req: vapeval.Request{
			Operation: admission.Create, Kind: cnpGVK, Resource: resourceOf(t, cnpGVK), Namespace: "sbx", Name: w.obj.GetName(),
			Object: w.obj, User: &user.DefaultInfo{Name: hostUser, Groups: manyGroups()}}})
	}
	// The schema's 32 selector terms, every one evaluated against sbx's
	// labels (bigConfig's fail on their first): the host is bound by a
	// selector whose 28 terms hold, and another host's 4 terms fail on
	// the last.
	values := []any{"1", "2", "3", "4", "5", "6", "7", "8"}
	notIn := func(k string) any { return map[string]any{"key": k, "operator": "NotIn", "values": values} }
	absent := func(k string) any { return map[string]any{"key": k, "operator": "DoesNotExist"} }
	selecting := caseConfig(t, defaultParams(t), vapeval.CaseParams{Spec: map[string]any{"hosts": []any{
		map[string]any{"username": hostUser, "namespaceSelector": map[string]any{"matchExpressions": []any{
			notIn("a"), notIn("b"), notIn("c"), map[string]any{"key": fencev1alpha1.FencedNamespaceLabel, "operator": "Exists"}}}},
		map[string]any{"username": "system:serviceaccount:other:host", "namespaceSelector": map[string]any{"matchExpressions": []any{
			absent("a"), absent("b"), absent("c"), absent(fencev1alpha1.FencedNamespaceLabel)}}},
	}}})
	w := worstPolicies()[0]
	out = append(out, costInput{name: "cnp: 32 selector terms, all evaluated: " + w.name, config: selecting, req: vapeval.Request{
		Operation: admission.Create, Kind: cnpGVK, Resource: resourceOf(t, cnpGVK), Namespace: "sbx", Name: w.obj.GetName(),
		Object: w.obj, User: &user.DefaultInfo{Name: hostUser, Groups: manyGroups()}}})
	return out
}

// nullShapes are requests the API server can send that no case writes:
// each metadata field a policy reads (annotations, labels, finalizers,
// ownerReferences) set to null in the new or the stored object, as a
// server-side apply that drops the last entry it owns sends it. From the
// first case of each policy and operation. TestCELCost requires that no
// expression errors on them: with failurePolicy Ignore an error would
// admit a write the policy would refuse. Before the holder-epoch policy
// read a null annotations map as one, an apply dropping a positive epoch
// was refused with an evaluation error instead of the removal rule's
// verdict.
func nullShapes(inputs []costInput) []costInput {
	var out []costInput
	seen := map[string]bool{}
	for _, in := range inputs {
		dir, _, _ := strings.Cut(in.name, "/")
		key := dir + " " + string(in.req.Operation) + " " + in.req.Resource.Resource
		if seen[key] || strings.Contains(in.name, ":") {
			continue
		}
		seen[key] = true
		for _, field := range []string{"annotations", "labels", "finalizers", "ownerReferences"} {
			for _, which := range []string{"object", "oldObject"} {
				req := in.req
				target := &req.Object
				if which == "oldObject" {
					target = &req.OldObject
				}
				u, ok := (*target).(*unstructured.Unstructured)
				if !ok || u == nil {
					continue
				}
				u = u.DeepCopy()
				md, _ := u.Object["metadata"].(map[string]any)
				if md == nil {
					continue
				}
				md[field] = nil
				*target = u
				out = append(out, costInput{name: "null shape: " + in.name + " with " + which + ".metadata." + field + ": null", req: req, config: in.config})
			}
		}
	}
	return out
}

const (
	epochKey     = "sandbox.namzu.ai/holder-epoch"
	changedAtKey = "sandbox.namzu.ai/operating-mode-changed-at"
	hashKey      = "sandbox.namzu.ai/pod-template-hash"
)

func withKey(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range m {
		out[a] = b
	}
	return out
}

func manyGroups() []string {
	var g []string
	for i := range 200 {
		g = append(g, fmt.Sprintf("group-%d", i))
	}
	return g
}

// bigParams is a FenceConfig at its schema's limits: 64 hosts with the
// longest ServiceAccount names, 512 namespaces of 63 characters in all, 16
// break-glass users and groups of 256 characters that all need escaping;
// the host is the last entry.
func bigParams(def *unstructured.Unstructured) *unstructured.Unstructured {
	p := def.DeepCopy()
	var hosts, users, groups []any
	label := func(prefix string, i int) string {
		s := fmt.Sprintf("%s%d-", prefix, i)
		return s + strings.Repeat("n", 63-len(s))
	}
	for i := range 63 {
		var nss []any
		for j := range 8 {
			nss = append(nss, label(fmt.Sprintf("ns%d-", i), j))
		}
		sa := label(fmt.Sprintf("sa%d-", i), 0)
		host := map[string]any{"username": "system:serviceaccount:" + sa + ":" + strings.Repeat("h", 253), "namespaces": nss}
		if i < 8 {
			// The schema's 32 selector terms, each of the longest key
			// and value, 4 to a selector: the most a selector adds.
			ml := map[string]any{}
			for j := range 4 {
				ml[label(fmt.Sprintf("p%d-%d-", i, j), 0)+"."+strings.Repeat("d", 189)+"/"+label("k", j)] = label("v", j)
			}
			host["namespaceSelector"] = map[string]any{"matchLabels": ml}
		}
		hosts = append(hosts, host)
	}
	var nss []any
	for j := range 7 {
		nss = append(nss, label("x", j))
	}
	hosts = append(hosts, map[string]any{"username": hostUser, "namespaces": append(nss, "sbx")})
	for i := range 16 {
		users = append(users, fmt.Sprintf("user-%d-%s", i, strings.Repeat(`"`, 240)))
		groups = append(groups, fmt.Sprintf("group-%d-%s", i, strings.Repeat(`"`, 240)))
	}
	// The label key the served def carries (the CRD's default).
	key, _, _ := unstructured.NestedString(def.Object, "spec", "perSandboxLabelKey")
	p.Object["spec"] = map[string]any{"hosts": hosts, "breakGlass": map[string]any{"users": users, "groups": groups}, "perSandboxLabelKey": key}
	return p
}

// bigConfig is bigParams rendered.
func bigConfig(t testing.TB) policyconfig.Config {
	t.Helper()
	big := bigParams(defaultParams(t))
	return caseConfig(t, big, vapeval.CaseParams{Spec: big.Object["spec"].(map[string]any)})
}

type worstPolicy struct {
	name string
	obj  *unstructured.Unstructured
}

func worstPolicies() []worstPolicy {
	uid := "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	mk := func(egress []any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
			"metadata": map[string]any{"name": "namzu-sbx-" + uid, "namespace": "sbx", "ownerReferences": []any{map[string]any{
				"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim", "name": "claim-a", "uid": uid}}},
			"spec": map[string]any{"endpointSelector": map[string]any{"matchLabels": map[string]any{"sandbox.namzu.ai/per-sandbox-egress": "claim-a"}}, "egress": egress}}}
	}
	kubeDNS := func(ports int, dns []any) map[string]any {
		var eps, tps []any
		for range 4 {
			eps = append(eps, map[string]any{"matchLabels": map[string]any{"k8s:io.kubernetes.pod.namespace": "kube-system", "k8s:k8s-app": "kube-dns"}})
		}
		for t := range 4 {
			var ps []any
			for range ports / 4 {
				ps = append(ps, map[string]any{"port": "53", "protocol": "UDP"})
			}
			tp := map[string]any{"ports": ps}
			if t == 0 && dns != nil {
				tp["rules"] = map[string]any{"dns": dns}
			}
			tps = append(tps, tp)
		}
		return map[string]any{"toEndpoints": eps, "toPorts": tps}
	}
	// long is a valid 253-character name; bad makes its last character upper case.
	long := func(i int, bad bool) string {
		l := strings.Repeat("a", 61)
		n := fmt.Sprintf("%02d%s.%s.%s.%s", i, l, l+"bb", l+"bb", l[:60]+"c")
		if len(n) != 253 {
			panic(fmt.Sprintf("long name is %d characters, want 253", len(n)))
		}
		if bad {
			n = n[:252] + "C"
		}
		return n
	}
	var out []worstPolicy
	for _, bad := range []bool{false, true} {
		out = append(out, sixteenRules(bad, long, kubeDNS, mk))
		// 64 short names, spread over every kind of name list.
		var fq, sn, dns []any
		for i := range 31 {
			fq = append(fq, map[string]any{"matchName": fmt.Sprintf("h%d.example.io", i)})
			if bad {
				fq[i] = map[string]any{"matchPattern": fmt.Sprintf("*.H%d", i)}
			}
		}
		for i := range 16 {
			sn = append(sn, fmt.Sprintf("s%d.example.io", i))
			dns = append(dns, map[string]any{"matchPattern": fmt.Sprintf("*.d%d.example.io", i)})
			if bad {
				sn[i] = fmt.Sprintf("S%d.example.io", i)
				dns[i] = map[string]any{"matchName": fmt.Sprintf("D%d.example.io", i)}
			}
		}
		out = append(out, worstPolicy{fmt.Sprintf("64 short names in toFQDNs, serverNames and dns rules (invalid=%v)", bad), mk([]any{
			kubeDNS(28, []any{map[string]any{"matchPattern": "*"}}),
			map[string]any{"toFQDNs": fq, "toPorts": []any{map[string]any{"ports": []any{map[string]any{"port": "443"}}, "serverNames": sn, "rules": map[string]any{"dns": dns}}}},
		})})
	}
	// A body that passes every check but the very last one its kind of
	// entry meets: each problem list runs every check, builds the one
	// message and, in the audit annotations, is joined in full.
	item := func(v any, i int) map[string]any { return v.([]any)[i].(map[string]any) }
	lastPort := sixteenRules(false, long, kubeDNS, mk)
	egress := lastPort.obj.Object["spec"].(map[string]any)["egress"]
	item(item(item(egress, 12)["toPorts"], 0)["ports"], 1)["protocol"] = "SCTP"
	lastPort.name = "16 rules, 32 ports, 8 names of 253 characters, refused only for the last port's protocol SCTP"
	lastName := sixteenRules(false, long, kubeDNS, mk)
	egress = lastName.obj.Object["spec"].(map[string]any)["egress"]
	item(item(egress, 15)["toFQDNs"], 0)["matchName"] = "A"
	lastName.name = "16 rules, 32 ports, 8 names of 253 characters, refused only for the last toFQDNs name"
	lastLong := sixteenRules(false, long, kubeDNS, mk)
	egress = lastLong.obj.Object["spec"].(map[string]any)["egress"]
	item(item(egress, 8)["toFQDNs"], 0)["matchName"] = long(7, true)
	lastLong.name = "16 rules, 32 ports, 8 names of 253 characters, refused only for the last long name"
	out = append(out, lastPort, lastName, lastLong)
	// 64 short names that are admitted: serverNames and dns rules in two
	// toPorts entries (one entry with both is refused), dns last.
	names64 := func(badServerName, badDNS bool) *unstructured.Unstructured {
		var fq, sn, dns []any
		for i := range 31 {
			fq = append(fq, map[string]any{"matchName": fmt.Sprintf("h%d.example.io", i)})
		}
		for i := range 16 {
			sn = append(sn, fmt.Sprintf("s%d.example.io", i))
			dns = append(dns, map[string]any{"matchPattern": fmt.Sprintf("*.d%d.example.io", i)})
		}
		if badServerName {
			sn[15] = "S15.example.io"
		}
		if badDNS {
			dns[15] = map[string]any{"matchPattern": "*.D15.example.io"}
		}
		return mk([]any{
			kubeDNS(28, []any{map[string]any{"matchPattern": "*"}}),
			map[string]any{"toFQDNs": fq, "toPorts": []any{
				map[string]any{"ports": []any{map[string]any{"port": "443"}}, "serverNames": sn},
				map[string]any{"ports": []any{map[string]any{"port": "80"}}, "rules": map[string]any{"dns": dns}},
			}},
		})
	}
	out = append(out,
		worstPolicy{"64 short names, admitted", names64(false, false)},
		worstPolicy{"64 short names, refused only for the last serverName", names64(true, false)},
		worstPolicy{"64 short names, refused only for the last dns rule", names64(false, true)})
	// Beyond every bound: the bounds must short-circuit before the walk.
	var huge []any
	for i := range 5000 {
		huge = append(huge, map[string]any{"matchName": fmt.Sprintf("h%d.example.io", i)})
	}
	var hugeRules []any
	for range 16 {
		hugeRules = append(hugeRules, map[string]any{"toFQDNs": huge})
	}
	out = append(out, worstPolicy{"16 rules of 5000 names", mk(hugeRules)})
	var manyRules []any
	for range 5000 {
		manyRules = append(manyRules, map[string]any{"toEntities": []any{"world"}})
	}
	out = append(out, worstPolicy{"5000 rules", mk(manyRules)})
	return out
}

// sixteenRules is 16 rules, 32 ports, and 2048 characters of names: 8 of 253
// characters, the rest of one. Valid, it is admitted; invalid, every name
// and every second port is refused.
func sixteenRules(bad bool, long func(int, bool) string, kubeDNS func(int, []any) map[string]any, mk func([]any) *unstructured.Unstructured) worstPolicy {
	egress := []any{kubeDNS(8, []any{map[string]any{"matchPattern": "*"}})}
	for i := range 15 {
		name := "a"
		if i < 8 {
			name = long(i, bad)
		}
		var ports []any
		for p := range 2 {
			ports = append(ports, map[string]any{"port": fmt.Sprint(8000 + p), "endPort": 9000, "protocol": "TCP"})
		}
		if bad {
			ports = append(ports[:1], map[string]any{"port": "99999", "endPort": 1, "protocol": "SCTP"})
		}
		rule := map[string]any{"toFQDNs": []any{map[string]any{"matchName": name}}}
		if i < 12 {
			rule["toPorts"] = []any{map[string]any{"ports": ports}}
		}
		egress = append(egress, rule)
	}
	return worstPolicy{fmt.Sprintf("16 rules, 32 ports, 8 names of 253 characters (invalid=%v)", bad), mk(egress)}
}
