package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// PluginPlatforms are the platforms kubectl fence is released for, one
// archive each, as krew installs it.
var PluginPlatforms = []string{"darwin/amd64", "darwin/arm64", "linux/amd64", "linux/arm64"}

// PluginArchive is the archive of kubectl fence for platform (os/arch).
func PluginArchive(platform string) string {
	return "kubectl-fence_" + strings.Replace(platform, "/", "_", 1) + ".tar.gz"
}

// PluginManifest is the krew manifest of the release: `kubectl krew install
// --manifest-url` takes it as is, and a krew index takes it as plugins/fence.yaml.
const PluginManifest = "kubectl-fence.yaml"

// DefaultDownloadURL is where the archives are published: the GitHub
// release of the version (-download-url overrides it).
const DefaultDownloadURL = "https://github.com/sandbox-fence/sandbox-fence/releases/download/"

// versionFlag sets the version kubectl fence version prints: a release is
// built from a checkout, where Go stamps no module version.
const versionFlag = "github.com/sandbox-fence/sandbox-fence/internal/buildinfo.version"

// writePlugin builds kubectl fence for each of platforms into out, each as
// a reproducible tar.gz (the binary and LICENSE, owned by root, dated when),
// and the krew manifest naming each archive's URL under downloadURL and
// its SHA-256. Each binary's header must name its platform: krew installs
// an archive by its selector alone.
func writePlugin(ctx context.Context, root, work, out, version, downloadURL string, env []string, when time.Time, platforms []string) error {
	license, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil {
		return err
	}
	type platform struct {
		Selector map[string]map[string]string `json:"selector"`
		URI      string                       `json:"uri"`
		SHA256   string                       `json:"sha256"`
		Bin      string                       `json:"bin"`
	}
	var manifestPlatforms []platform
	for _, p := range platforms {
		goos, goarch, _ := strings.Cut(p, "/")
		bin := filepath.Join(work, "kubectl-fence-"+goos+"-"+goarch)
		if err := goRun(ctx, root, slices.Concat(env, []string{"GOOS=" + goos, "GOARCH=" + goarch, "CGO_ENABLED=0"}),
			"build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -X "+versionFlag+"="+version, "-o", bin, "./cmd/kubectl-fence"); err != nil {
			return err
		}
		exe, err := os.ReadFile(bin)
		if err != nil {
			return err
		}
		if got := executablePlatform(exe); got != p {
			return fmt.Errorf("kubectl fence built for %s is an executable for %q", p, got)
		}
		archive, err := tarGz(when, []tarEntry{{"kubectl-fence", 0o755, exe}, {"LICENSE", 0o644, license}})
		if err != nil {
			return err
		}
		name := PluginArchive(p)
		if err := os.WriteFile(filepath.Join(out, name), archive, 0o644); err != nil {
			return err
		}
		manifestPlatforms = append(manifestPlatforms, platform{
			Selector: map[string]map[string]string{"matchLabels": {"os": goos, "arch": goarch}},
			URI:      strings.TrimSuffix(downloadURL, "/") + "/" + version + "/" + name,
			SHA256:   fmt.Sprintf("%x", sha256.Sum256(archive)),
			Bin:      "kubectl-fence",
		})
	}
	manifest, err := yaml.Marshal(map[string]any{
		"apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
		"kind":       "Plugin",
		"metadata":   map[string]any{"name": "fence"},
		"spec": map[string]any{
			"version":          version,
			"homepage":         "https://github.com/sandbox-fence/sandbox-fence",
			"shortDescription": "Audit, check and test sandbox-fence admission",
			"description": "Reads a cluster that runs sandbox-fence and writes nothing: audit reports what the\n" +
				"installed fence would refuse among existing Sandboxes and per-sandbox\n" +
				"CiliumNetworkPolicies, status shows one Sandbox's fencing state, check names\n" +
				"what is missing from the installation, and test evaluates case files against\n" +
				"the shipped policies offline.\n",
			"platforms": manifestPlatforms,
		},
	})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, PluginManifest), manifest, 0o644)
}

type tarEntry struct {
	name string
	mode int64
	body []byte
}

// tarGz is a gzip-compressed tar of entries whose bytes depend on nothing
// but the entries and when.
func tarGz(when time.Time, entries []tarEntry) ([]byte, error) {
	var b bytes.Buffer
	gz, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	gz.ModTime = when
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.body)), ModTime: when, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// executablePlatform reads os/arch from an ELF or Mach-O header.
func executablePlatform(b []byte) string {
	if f, err := elf.NewFile(bytes.NewReader(b)); err == nil {
		return map[elf.Machine]string{elf.EM_X86_64: "linux/amd64", elf.EM_AARCH64: "linux/arm64"}[f.Machine]
	}
	if f, err := macho.NewFile(bytes.NewReader(b)); err == nil {
		return map[macho.Cpu]string{macho.CpuAmd64: "darwin/amd64", macho.CpuArm64: "darwin/arm64"}[f.Cpu]
	}
	return ""
}
