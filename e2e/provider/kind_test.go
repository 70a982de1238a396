package provider

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeKind records the calls the provider makes to kind.
type fakeKind struct {
	calls   []string
	loadErr error
}

func (f *fakeKind) Create(name, configPath, kubeconfigPath string) error {
	f.calls = append(f.calls, "create "+name+" config="+filepath.Base(configPath)+" kubeconfig="+filepath.Base(kubeconfigPath))
	return nil
}

func (f *fakeKind) LoadImageArchive(name, archivePath string) error {
	f.calls = append(f.calls, "load "+name+" "+filepath.Base(archivePath))
	return f.loadErr
}

func (f *fakeKind) Delete(name, kubeconfigPath string) error {
	f.calls = append(f.calls, "delete "+name+" kubeconfig="+filepath.Base(kubeconfigPath))
	return nil
}

func (f *fakeKind) CollectLogs(name, dir string) error {
	f.calls = append(f.calls, "logs "+name+" "+dir)
	return nil
}

func discard(string, ...any) {}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func TestShippedKindConfigIsAOneNodeV137Cluster(t *testing.T) {
	c, err := LoadKindConfig(filepath.Join(repoRoot(t), "kind.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var roles, images []string
	for _, n := range c.Nodes {
		roles = append(roles, string(n.Role))
		images = append(images, strings.SplitN(n.Image, "@sha256:", 2)[0])
	}
	if d := cmp.Diff([]string{"control-plane"}, roles); d != "" {
		t.Errorf("node roles (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"kindest/node:v1.37.0"}, images); d != "" {
		t.Errorf("node images, without digest (-want +got):\n%s", d)
	}
	for _, n := range c.Nodes {
		if !strings.Contains(n.Image, "@sha256:") {
			t.Errorf("node image %q is not pinned by digest", n.Image)
		}
	}
}

func TestKindConfigWithAnUnknownFieldIsRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kind.yaml")
	if err := os.WriteFile(p, []byte("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n- role: control-plane\n  imagee: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadKindConfig(p)
	if err == nil || !strings.Contains(err.Error(), "imagee") {
		t.Fatalf("want an error naming the unknown field imagee, got %v", err)
	}
}

func TestKindProviderRefusesToStartWithoutTheImageArchive(t *testing.T) {
	f := &fakeKind{}
	k := &Kind{RepoRoot: repoRoot(t), ClusterName: "sf", ConfigPath: filepath.Join(repoRoot(t), "kind.yaml"), Logf: discard, api: f}
	_, err := k.Setup(context.Background())
	if err == nil || !strings.Contains(err.Error(), EnvImageArchive) {
		t.Fatalf("want an error naming %s, got %v", EnvImageArchive, err)
	}
	if len(f.calls) != 0 {
		t.Errorf("kind was called before the inputs were valid: %v", f.calls)
	}
}

func TestKindProviderCreatesLoadsAndDeletesTheNamedCluster(t *testing.T) {
	archive := filepath.Join(t.TempDir(), "webhook-image.tar")
	if err := os.WriteFile(archive, []byte("not really an image"), 0o644); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("no container engine in unit tests")
	f := &fakeKind{loadErr: stop}
	k := &Kind{RepoRoot: repoRoot(t), ClusterName: "sf-unit", ConfigPath: filepath.Join(repoRoot(t), "kind.yaml"), ImageArchive: archive, Logf: discard, api: f}
	_, err := k.Setup(context.Background())
	if !errors.Is(err, stop) {
		t.Fatalf("Setup: want the load error, got %v", err)
	}
	if err := k.Teardown(context.Background(), true, "/tmp/artifacts"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"create sf-unit config=kind.yaml kubeconfig=kubeconfig",
		"load sf-unit webhook-image.tar",
		"logs sf-unit /tmp/artifacts",
		"delete sf-unit kubeconfig=kubeconfig",
	}
	if d := cmp.Diff(want, f.calls); d != "" {
		t.Errorf("kind calls (-want +got):\n%s", d)
	}
}

func TestProviderIsChosenExplicitly(t *testing.T) {
	tests := []struct {
		name       string
		provider   string
		kubeconfig string
		want       string
		wantErr    string
	}{
		{name: "no setting starts a local control plane", want: "local"},
		{name: "a KUBECONFIG alone does not redirect the suite to that cluster", kubeconfig: "/somewhere/config", want: "local"},
		{name: "kubeconfig with KUBECONFIG uses that cluster", provider: "kubeconfig", kubeconfig: "/somewhere/config", want: "kubeconfig"},
		{name: "kubeconfig without KUBECONFIG is refused", provider: "kubeconfig", wantErr: "needs KUBECONFIG"},
		{name: "kind is kind", provider: "kind", want: "kind"},
		{name: "an unknown provider is refused", provider: "minikube", wantErr: `E2E_PROVIDER="minikube": want local`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvProvider, tc.provider)
			t.Setenv("KUBECONFIG", tc.kubeconfig)
			t.Chdir(repoRoot(t))
			p, err := FromEnv(discard)
			got, gotErr := "", ""
			if err != nil {
				gotErr = err.Error()
			} else {
				got = p.Name()
				if l, ok := p.(*Local); ok {
					_ = os.RemoveAll(l.StateDir)
				}
			}
			if tc.wantErr != "" {
				if !strings.Contains(gotErr, tc.wantErr) {
					t.Fatalf("error %q, want it to contain %q", gotErr, tc.wantErr)
				}
				return
			}
			if gotErr != "" || got != tc.want {
				t.Fatalf("provider %q (error %q), want %q", got, gotErr, tc.want)
			}
		})
	}
}
