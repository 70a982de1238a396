package fencectl

import (
	"context"
	"fmt"
	"sort"
	"time"

	reportsv1alpha1 "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// The audit as policy reports (`kubectl fence audit -o policyreport`), in
// openreports.io/v1alpha1: the Policy Working Group's report API, which
// succeeds wgpolicyk8s.io/v1alpha2 and which Kyverno and Policy Reporter
// read. Its Go types and CRDs come in one small module
// (github.com/openreports/reports-api, client-go and apimachinery only),
// while wgpolicyk8s.io's are published only inside the engines' modules.
const (
	// ReportName names the one Report per namespace, and the one
	// ClusterReport, an audit writes, so a later audit replaces them.
	ReportName = "sandbox-fence"
	// ReportSource is the source of every report and result.
	ReportSource = "sandbox-fence"
	// ReportManagedBy labels every report (app.kubernetes.io/managed-by), so
	// `kubectl apply --prune -l` removes those of namespaces that no longer
	// have anything to audit.
	ReportManagedBy = "kubectl-fence"
)

// PolicyReports renders the audit as a v1 List: one Report per namespace
// that holds an audited Sandbox or per-sandbox policy, and one ClusterReport
// for the findings no namespace can hold (a host's namespace that lacks the
// opt-in label or does not exist, and objects whose namespace is gone). A
// result is a finding (fail); an audited object without findings counts as
// a pass in its namespace's summary, with no result of its own, so a report
// stays small in a namespace of thousands of sandboxes.
func (r *AuditReport) PolicyReports(now time.Time) *metav1.List {
	ts := metav1.Timestamp{Seconds: now.Unix()}
	meta := func(ns string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: ReportName, Namespace: ns, Labels: map[string]string{"app.kubernetes.io/managed-by": ReportManagedBy}}
	}
	cluster := &reportsv1alpha1.ClusterReport{
		TypeMeta:   metav1.TypeMeta{APIVersion: reportsv1alpha1.SchemeGroupVersion.String(), Kind: "ClusterReport"},
		ObjectMeta: meta(""),
		Source:     ReportSource,
	}
	reports := map[string]*reportsv1alpha1.Report{}
	report := func(ns string) *reportsv1alpha1.Report {
		if reports[ns] == nil {
			reports[ns] = &reportsv1alpha1.Report{
				TypeMeta:   metav1.TypeMeta{APIVersion: reportsv1alpha1.SchemeGroupVersion.String(), Kind: "Report"},
				ObjectMeta: meta(ns),
				Source:     ReportSource,
			}
		}
		return reports[ns]
	}
	for ns := range r.audited {
		report(ns)
	}
	failing := map[string]map[string]bool{}
	for _, f := range r.Findings {
		res := reportsv1alpha1.ReportResult{
			Source: ReportSource, Policy: f.By, Rule: f.Check, Result: "fail", Scored: true, Timestamp: ts,
			Subjects:    []corev1.ObjectReference{{APIVersion: apiVersionOf(f.Kind), Kind: f.Kind, Namespace: f.Namespace, Name: f.Name}},
			Description: f.Message,
		}
		if f.Namespace == "" || f.Check == CheckNamespaceMissing {
			cluster.Results = append(cluster.Results, res)
			cluster.Summary.Fail++
			continue
		}
		rep := report(f.Namespace)
		rep.Results = append(rep.Results, res)
		rep.Summary.Fail++
		if failing[f.Namespace] == nil {
			failing[f.Namespace] = map[string]bool{}
		}
		failing[f.Namespace][f.Kind+"/"+f.Name] = true
	}
	list := &metav1.List{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}}
	namespaces := make([]string, 0, len(reports))
	for ns := range reports {
		namespaces = append(namespaces, ns)
	}
	sort.Strings(namespaces)
	for _, ns := range namespaces {
		rep := reports[ns]
		rep.Summary.Pass = r.audited[ns] - len(failing[ns])
		list.Items = append(list.Items, runtime.RawExtension{Object: rep})
	}
	// The ClusterReport comes last, and even empty, so it replaces an
	// earlier one that had findings.
	list.Items = append(list.Items, runtime.RawExtension{Object: cluster})
	return list
}

// apiVersionOf is the apiVersion of a kind an audit finding names.
func apiVersionOf(kind string) string {
	switch kind {
	case "Sandbox":
		return sandboxGVR.GroupVersion().String()
	case "CiliumNetworkPolicy":
		return cnpGVR.GroupVersion().String()
	}
	return "v1"
}

// ReportsFieldManager writes the reports WriteReports applies.
const ReportsFieldManager = "sandbox-fence-reports"

var (
	reportGVR        = reportsv1alpha1.SchemeGroupVersion.WithResource("reports")
	clusterReportGVR = reportsv1alpha1.SchemeGroupVersion.WithResource("clusterreports")
)

// WriteReports applies list (PolicyReports) server-side, then deletes every
// report labelled ReportManagedBy that list does not hold: the report of a
// namespace with nothing left to audit, or that is gone. It is what the
// in-cluster reports CronJob runs (config/components/policy-reports), with
// no moment without reports, as a delete-then-apply by hand would have.
func WriteReports(ctx context.Context, c Clients, list *metav1.List) (written, deleted int, err error) {
	keep := map[string]bool{}
	for _, item := range list.Items {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(item.Object)
		if err != nil {
			return written, deleted, err
		}
		u := &unstructured.Unstructured{Object: m}
		gvr := clusterReportGVR
		if u.GetNamespace() != "" {
			gvr = reportGVR
		}
		if _, err := reportResource(c, gvr, u.GetNamespace()).Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: ReportsFieldManager, Force: true}); err != nil {
			return written, deleted, fmt.Errorf("writing %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
		keep[u.GetKind()+"/"+u.GetNamespace()+"/"+u.GetName()] = true
		written++
	}
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=" + ReportManagedBy}
	for kind, gvr := range map[string]schema.GroupVersionResource{"Report": reportGVR, "ClusterReport": clusterReportGVR} {
		have, err := c.Dynamic.Resource(gvr).List(ctx, sel)
		if err != nil {
			return written, deleted, fmt.Errorf("listing %ss: %w", kind, err)
		}
		for _, r := range have.Items {
			if keep[kind+"/"+r.GetNamespace()+"/"+r.GetName()] {
				continue
			}
			if err := reportResource(c, gvr, r.GetNamespace()).Delete(ctx, r.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return written, deleted, fmt.Errorf("deleting %s %s/%s: %w", kind, r.GetNamespace(), r.GetName(), err)
			}
			deleted++
		}
	}
	return written, deleted, nil
}

// reportResource is the client of a report in namespace, or of a
// cluster-scoped one when namespace is empty.
func reportResource(c Clients, gvr schema.GroupVersionResource, namespace string) dynamic.ResourceInterface {
	if namespace == "" {
		return c.Dynamic.Resource(gvr)
	}
	return c.Dynamic.Resource(gvr).Namespace(namespace)
}
