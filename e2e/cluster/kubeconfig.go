package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteServiceAccountKubeconfig writes to path a kubeconfig for the
// ServiceAccount ns/name, with a TokenRequest token valid for a day (longer
// than any run): a process started with it has that ServiceAccount's RBAC,
// as it would in a pod, not system:masters'.
func (c *ControlPlane) WriteServiceAccountKubeconfig(ctx context.Context, kube kubernetes.Interface, ns, name, path string) error {
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: new(int64(24 * 3600))}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("a token for the ServiceAccount %s/%s: %w", ns, name, err)
	}
	cfg := rest.AnonymousClientConfig(c.AdminConfig())
	cfg.BearerToken = tr.Status.Token
	return WriteKubeconfig(path, map[string]*rest.Config{name: cfg}, name)
}

// WriteKubeconfig writes one context per identity (context, user and cluster
// all named after the identity) with credentials embedded, so the file works
// from any directory and `kubectl --context host` acts as the host.
func WriteKubeconfig(path string, identities map[string]*rest.Config, current string) error {
	if _, ok := identities[current]; !ok {
		return fmt.Errorf("kubeconfig %s: current context %q is not one of the identities", path, current)
	}
	cfg := clientcmdapi.NewConfig()
	names := make([]string, 0, len(identities))
	for n := range identities {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		rc := identities[n]
		cfg.Clusters[n] = &clientcmdapi.Cluster{
			Server:                   rc.Host,
			CertificateAuthorityData: rc.CAData,
			InsecureSkipTLSVerify:    rc.Insecure,
		}
		cfg.AuthInfos[n] = &clientcmdapi.AuthInfo{
			ClientCertificateData: rc.CertData,
			ClientKeyData:         rc.KeyData,
			Token:                 rc.BearerToken,
			Impersonate:           rc.Impersonate.UserName,
			ImpersonateGroups:     rc.Impersonate.Groups,
		}
		cfg.Contexts[n] = &clientcmdapi.Context{Cluster: n, AuthInfo: n}
	}
	cfg.CurrentContext = current
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}
