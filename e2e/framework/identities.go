package framework

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	fencev1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
)

// MintUser returns a rest.Config authenticating as user in groups. The local
// provider issues client certificates; other providers impersonate.
type MintUser func(user string, groups []string) (*rest.Config, error)

// Impersonating is the MintUser of providers that cannot issue credentials:
// the admin impersonates the identity, which the apiserver authorizes and
// admits exactly as that user.
func Impersonating(admin *rest.Config) MintUser {
	return func(user string, groups []string) (*rest.Config, error) {
		cfg := rest.CopyConfig(admin)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
		return cfg, nil
	}
}

// HostRules is the Role a host holds in its namespace, including the
// opt-in per-sandbox egress rules. It has no `update`: every host change is a
// PATCH, so a PUT by the host must fail on RBAC before admission.
func HostRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{SandboxGVR.Group}, Resources: []string{SandboxGVR.Resource}, Verbs: []string{"create", "get", "list", "patch", "delete"}},
		{APIGroups: []string{ClaimGVR.Group}, Resources: []string{ClaimGVR.Resource}, Verbs: []string{"create", "get", "list", "patch", "delete"}},
		{APIGroups: []string{ClaimGVR.Group}, Resources: []string{"sandboxtemplates", "sandboxwarmpools"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{CNPGVR.Group}, Resources: []string{CNPGVR.Resource}, Verbs: []string{"get", "list", "create", "patch", "delete"}},
	}
}

// HostClusterRules lets the host read the fence before its first write
// (it refuses to write when the policy or binding is unreadable).
func HostClusterRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{
		APIGroups: []string{VAPGVR.Group},
		Resources: []string{VAPGVR.Resource, VAPBindingGVR.Resource},
		Verbs:     []string{"get"},
	}}
}

// SetupIdentities creates the production-shaped identities with e.Admin and
// fills the other Env identities: the fenced namespaces, the two host
// ServiceAccounts with the host Role and tokens from the TokenRequest API,
// the operator (built-in `admin` ClusterRole in the host namespace) and the
// break-glass user. Each identity is checked with a SelfSubjectReview.
func (e *Env) SetupIdentities(ctx context.Context, mint MintUser) error {
	e.HostNamespace, e.OtherHostNamespace = HostNamespace, OtherHostNamespace
	kc := e.Admin.Kube
	if _, err := kc.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: HostClusterRole},
		Rules:      HostClusterRules(),
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	var err error
	if e.Host, err = e.setupHost(ctx, ContextHost, HostNamespace, HostServiceAccount); err != nil {
		return err
	}
	if e.OtherHost, err = e.setupHost(ctx, ContextOtherHost, OtherHostNamespace, OtherServiceAccount); err != nil {
		return err
	}

	if _, err := kc.RbacV1().RoleBindings(HostNamespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "sandbox-operator-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: OperatorUser}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	// What agent-sandbox and Cilium ship for namespace admins: their
	// resources aggregated into the built-in admin role, so the operator is
	// an ordinary namespace admin, not a special case of the suite.
	if _, err := kc.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "sandbox-fence-e2e-aggregate-to-admin", Labels: map[string]string{
			"rbac.authorization.k8s.io/aggregate-to-admin": "true",
		}},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{SandboxGVR.Group}, Resources: []string{SandboxGVR.Resource, SandboxGVR.Resource + "/status"}, Verbs: []string{"*"}},
			{APIGroups: []string{ClaimGVR.Group}, Resources: []string{"*"}, Verbs: []string{"*"}},
			{APIGroups: []string{CNPGVR.Group}, Resources: []string{CNPGVR.Resource}, Verbs: []string{"*"}},
		},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	opCfg, err := mint(OperatorUser, nil)
	if err != nil {
		return err
	}
	if e.Operator, err = NewIdentity(ContextOperator, OperatorUser, nil, opCfg); err != nil {
		return err
	}
	// The aggregation controller folds the rules in asynchronously.
	if err := e.WaitAllowed(ctx, e.Operator, authzv1.ResourceAttributes{
		Namespace: HostNamespace, Verb: "create", Group: CNPGVR.Group, Resource: CNPGVR.Resource,
	}); err != nil {
		return err
	}

	// Break-glass repairs a malformed epoch on any Sandbox, so it needs write
	// access to them; the repair VAP is what it is exempt from, not RBAC.
	if _, err := kc.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "sandbox-fence-break-glass"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{SandboxGVR.Group}, Resources: []string{SandboxGVR.Resource},
			Verbs: []string{"get", "list", "patch", "update"},
		}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := kc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "sandbox-fence-break-glass"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "sandbox-fence-break-glass"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: BreakGlassGroup}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	bgCfg, err := mint(BreakGlassUser, []string{BreakGlassGroup})
	if err != nil {
		return err
	}
	if e.BreakGlass, err = NewIdentity(ContextBreakGlass, BreakGlassUser, []string{BreakGlassGroup}, bgCfg); err != nil {
		return err
	}
	return e.VerifyIdentities(ctx)
}

func (e *Env) setupHost(ctx context.Context, name, ns, sa string) (*Identity, error) {
	kc := e.Admin.Kube
	// Opted in, and enforcing Pod Security baseline, as docs/install.md
	// tells an admin (no pod on the host's network).
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   ns,
		Labels: map[string]string{fencev1.FencedNamespaceLabel: fencev1.FencedNamespaceValue, "pod-security.kubernetes.io/enforce": "baseline"},
	}}
	if _, err := kc.CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		cur, err := kc.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if cur.Labels[fencev1.FencedNamespaceLabel] != fencev1.FencedNamespaceValue {
			return nil, fmt.Errorf("namespace %s exists without the opt-in label %s=%s; delete it or label it",
				ns, fencev1.FencedNamespaceLabel, fencev1.FencedNamespaceValue)
		}
	} else if err != nil {
		return nil, err
	}
	if _, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if _, err := kc.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: HostRole}, Rules: HostRules()}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}
	if _, err := kc.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: HostRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: HostRole},
		Subjects:   subject,
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if _, err := kc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: HostClusterRole + "-" + ns + "-" + sa},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: HostClusterRole},
		Subjects:   subject,
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	tr, err := kc.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(24 * 3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("TokenRequest for %s/%s: %w", ns, sa, err)
	}
	cfg := rest.AnonymousClientConfig(e.Admin.Config)
	cfg.BearerToken = tr.Status.Token
	return NewIdentity(name, ServiceAccountUser(ns, sa), nil, cfg)
}

// WaitAllowed polls a SelfSubjectAccessReview of id until attrs is allowed.
func (e *Env) WaitAllowed(ctx context.Context, id *Identity, attrs authzv1.ResourceAttributes) error {
	what := fmt.Sprintf("%s may %s %s.%s in %s", id.Name, attrs.Verb, attrs.Resource, attrs.Group, attrs.Namespace)
	return Eventually(ctx, time.Minute, 200*time.Millisecond, what, func(ctx context.Context) (bool, string, error) {
		r, err := id.Kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{
			Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs},
		}, metav1.CreateOptions{})
		if err != nil {
			return false, "", err
		}
		return r.Status.Allowed, r.Status.Reason, nil
	})
}

// VerifyIdentities asks the apiserver who each identity is, so that a
// credential mix-up fails setup instead of making every verdict meaningless.
func (e *Env) VerifyIdentities(ctx context.Context) error {
	var errs []error
	for _, id := range e.Identities() {
		if id.Username == "" {
			continue // the admin of a foreign kubeconfig can be anyone
		}
		r, err := id.Kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			errs = append(errs, fmt.Errorf("identity %s: SelfSubjectReview: %w", id.Name, err))
			continue
		}
		got := r.Status.UserInfo
		if got.Username != id.Username {
			errs = append(errs, fmt.Errorf("identity %s authenticates as %q, want %q", id.Name, got.Username, id.Username))
		}
		for _, g := range id.Groups {
			if !slices.Contains(got.Groups, g) {
				errs = append(errs, fmt.Errorf("identity %s lacks group %q (has %v)", id.Name, g, got.Groups))
			}
		}
	}
	return errors.Join(errs...)
}

// FenceConfigSpec is the configuration the suite installs: both hosts bound,
// each to its own namespace, and the break-glass group.
func (e *Env) FenceConfigSpec() fencev1.FenceConfigSpec {
	return fencev1.FenceConfigSpec{
		Hosts: []fencev1.Host{
			{Username: e.Host.Username, Namespaces: []string{e.HostNamespace}},
			{Username: e.OtherHost.Username, Namespaces: []string{e.OtherHostNamespace}},
		},
		BreakGlass: fencev1.BreakGlass{Groups: []string{BreakGlassGroup}},
	}
}

// ConfigureFence applies FenceConfigSpec to the FenceConfig named name
// (created when config/default did not ship one).
func (e *Env) ConfigureFence(ctx context.Context, name string) error {
	return e.ConfigureFenceSpec(ctx, name, e.FenceConfigSpec())
}

// ConfigureFenceSpec applies the FenceConfig name with spec's hosts (their
// namespaces and namespaceSelectors) and break-glass groups, under the same field manager as ConfigureFence, so a
// test can change the configuration and ConfigureFence restore it.
func (e *Env) ConfigureFenceSpec(ctx context.Context, name string, spec fencev1.FenceConfigSpec) error {
	hosts := []any{}
	for _, h := range spec.Hosts {
		ns := []any{}
		for _, n := range h.Namespaces {
			ns = append(ns, n)
		}
		host := map[string]any{"username": h.Username, "namespaces": ns}
		if h.NamespaceSelector != nil {
			sel, err := runtime.DefaultUnstructuredConverter.ToUnstructured(h.NamespaceSelector)
			if err != nil {
				return err
			}
			host["namespaceSelector"] = sel
			if len(ns) == 0 {
				delete(host, "namespaces")
			}
		}
		hosts = append(hosts, host)
	}
	groups := []any{}
	for _, g := range spec.BreakGlass.Groups {
		groups = append(groups, g)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": fencev1.GroupVersion.String(),
		"kind":       fencev1.Kind,
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"hosts": hosts, "breakGlass": map[string]any{"groups": groups}},
	}}
	return e.Apply(ctx, []*unstructured.Unstructured{obj}, ApplyOptions{FieldManager: FieldManager + "-fenceconfig"})
}

// InstallBaseline applies the baseline policy of the Cilium install path
// (config/components/cilium-baseline), as docs/install.md
// has an admin do on a cluster that runs Cilium.
func (e *Env) InstallBaseline(ctx context.Context, repoRoot string) error {
	objs, err := ReadYAMLFile(filepath.Join(repoRoot, "config", "components", "cilium-baseline", "baseline.yaml"))
	if err != nil {
		return err
	}
	return e.Apply(ctx, objs, ApplyOptions{})
}
