package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteKubeconfig writes one context per identity (context, user and cluster
// all named after the identity) with credentials embedded, so the file works
// from any directory and `kubectl --context host` acts as the host.
func (c *ControlPlane) WriteKubeconfig(path string, identities map[string]*rest.Config, current string) error {
	return WriteKubeconfig(path, identities, current)
}

// WriteKubeconfig is the free-standing form, for providers without a local
// control plane.
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
