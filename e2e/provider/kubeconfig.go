package provider

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	fencev1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/e2e/framework"
)

// Kubeconfig runs the suite against a cluster that already has the CRDs and
// the bundle installed. A kubeconfig written by `devcluster up` carries all
// five identity contexts and is used as is; with any other kubeconfig the
// current context is the admin, the identities are created with it and the
// operator and break-glass users are impersonated.
type Kubeconfig struct {
	Path string
	Logf framework.Logf
}

// Name implements Provider.
func (k *Kubeconfig) Name() string { return "kubeconfig" }

func contextConfig(path, context string) (*rest.Config, error) {
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: path},
		&clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
}

// Setup implements Provider.
func (k *Kubeconfig) Setup(ctx context.Context) (*framework.Env, error) {
	raw, err := clientcmd.LoadFromFile(k.Path)
	if err != nil {
		return nil, fmt.Errorf("read KUBECONFIG %s: %w", k.Path, err)
	}
	all := true
	for _, c := range []string{framework.ContextAdmin, framework.ContextHost, framework.ContextOtherHost, framework.ContextOperator, framework.ContextBreakGlass} {
		if _, ok := raw.Contexts[c]; !ok {
			all = false
		}
	}
	env := &framework.Env{Provider: k.Name(), HostNamespace: framework.HostNamespace, OtherHostNamespace: framework.OtherHostNamespace}
	if all {
		k.Logf("kubeconfig: using the devcluster contexts of %s", k.Path)
		ids := []struct {
			field         **framework.Identity
			context, user string
			groups        []string
		}{
			{&env.Admin, framework.ContextAdmin, "", nil},
			{&env.Host, framework.ContextHost, framework.ServiceAccountUser(framework.HostNamespace, framework.HostServiceAccount), nil},
			{&env.OtherHost, framework.ContextOtherHost, framework.ServiceAccountUser(framework.OtherHostNamespace, framework.OtherServiceAccount), nil},
			{&env.Operator, framework.ContextOperator, framework.OperatorUser, nil},
			{&env.BreakGlass, framework.ContextBreakGlass, framework.BreakGlassUser, []string{framework.BreakGlassGroup}},
		}
		for _, id := range ids {
			cfg, err := contextConfig(k.Path, id.context)
			if err != nil {
				return nil, err
			}
			if *id.field, err = framework.NewIdentity(id.context, id.user, id.groups, cfg); err != nil {
				return nil, err
			}
		}
		if err := env.CheckServerVersion(ctx, "", k.Logf); err != nil {
			return nil, err
		}
		if err := env.VerifyIdentities(ctx); err != nil {
			return nil, err
		}
	} else {
		k.Logf("kubeconfig: current context of %s is the admin; creating the identities (operator and break-glass impersonated)", k.Path)
		cfg, err := contextConfig(k.Path, "")
		if err != nil {
			return nil, err
		}
		if env.Admin, err = framework.NewIdentity(framework.ContextAdmin, "", nil, cfg); err != nil {
			return nil, err
		}
		// Before anything is written to the cluster.
		if err := env.CheckServerVersion(ctx, "", k.Logf); err != nil {
			return nil, err
		}
		if err := env.SetupIdentities(ctx, framework.Impersonating(cfg)); err != nil {
			return nil, err
		}
		if err := env.ConfigureFence(ctx, fencev1.DefaultConfigName); err != nil {
			return nil, err
		}
	}
	if err := finishEnv(ctx, env, k.Logf); err != nil {
		return nil, err
	}
	return env, nil
}

// finishEnv fills what a provider learns from the cluster itself, then waits
// for enforcement.
func finishEnv(ctx context.Context, env *framework.Env, logf framework.Logf) error {
	_, err := env.Admin.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, framework.WebhookConfigName, metav1.GetOptions{})
	switch {
	case err == nil:
		env.WebhookInstalled = true
	case apierrors.IsNotFound(err):
		logf("!!! ValidatingWebhookConfiguration %s not installed: webhook cases will skip", framework.WebhookConfigName)
	default:
		return err
	}
	if env.ConversionServed, err = framework.ConversionServed(ctx, env); err != nil {
		return err
	}
	return env.WaitForEnforcement(ctx, logf)
}

// Teardown implements Provider: the cluster is not ours to stop.
func (k *Kubeconfig) Teardown(context.Context, bool, string) error { return nil }
