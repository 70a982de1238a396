package fencectl

import (
	"context"
	"fmt"
	"runtime"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/buildinfo"
)

// VersionReport is the output of `kubectl fence version`.
type VersionReport struct {
	APIVersion string        `json:"apiVersion"`
	Kind       string        `json:"kind"`
	Client     ClientVersion `json:"client"`
	// Server is absent with --client.
	Server *ServerVersion `json:"server,omitempty"`
}

// ClientVersion is the plugin binary's own build.
type ClientVersion struct {
	// Version is the release the binary was built from, "(devel)" from an
	// untagged tree.
	Version   string `json:"version"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// ServerVersion is what the cluster runs: Kubernetes, and the webhook's
// images, which name the installed release.
type ServerVersion struct {
	Kubernetes string `json:"kubernetes"`
	// WebhookImages are the images of the webhook Deployment's containers;
	// empty when the Deployment is not installed.
	WebhookImages []string `json:"webhookImages"`
}

// Version reports the plugin's build and, with c set, the cluster's
// Kubernetes version and the installed webhook's images. A missing webhook
// Deployment is reported as such, not as an error: version answers on a
// cluster where sandbox-fence is not installed yet.
func Version(ctx context.Context, c *Clients, o CheckOptions) (*VersionReport, error) {
	r := &VersionReport{
		APIVersion: fencev1alpha1.GroupVersion.String(), Kind: "Version",
		Client: ClientVersion{Version: buildinfo.Version(), GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH},
	}
	if c == nil {
		return r, nil
	}
	sv, err := c.Kube.Discovery().ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("reading the server's version: %w", err)
	}
	r.Server = &ServerVersion{Kubernetes: sv.GitVersion, WebhookImages: []string{}}
	d, err := c.Kube.AppsV1().Deployments(o.WebhookNamespace).Get(ctx, o.WebhookConfig, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, fmt.Errorf("reading Deployment %s/%s: %w", o.WebhookNamespace, o.WebhookConfig, err)
	default:
		for _, ctr := range d.Spec.Template.Spec.Containers {
			r.Server.WebhookImages = append(r.Server.WebhookImages, ctr.Image)
		}
	}
	return r, nil
}

// String renders the versions for a person.
func (r *VersionReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Client: kubectl-fence %s (%s, %s)\n", r.Client.Version, r.Client.GoVersion, r.Client.Platform)
	if r.Server == nil {
		return b.String()
	}
	fmt.Fprintf(&b, "Server: Kubernetes %s\n", r.Server.Kubernetes)
	if len(r.Server.WebhookImages) == 0 {
		b.WriteString("Webhook: not installed\n")
	} else {
		fmt.Fprintf(&b, "Webhook: %s\n", strings.Join(r.Server.WebhookImages, ", "))
	}
	return b.String()
}
