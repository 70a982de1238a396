// Command release writes a release of sandbox-fence into one directory
// (make release VERSION=vX.Y.Z; docs/install.md, "Install from a release"):
//
//   - webhook-image.oci.tar: the webhook's images for linux/amd64 and
//     linux/arm64 (the linux entries of -platforms) under one OCI image
//     index (hack/image -oci), an OCI image-layout tarball that `crane
//     push --index` publishes;
//   - install.yaml: config/default rendered with the image pinned by the
//     index digest, CRD and Namespace first, without the FenceConfig: on an
//     empty cluster its CRD alone (the version gate, selected by its label),
//     then the whole file;
//   - fenceconfig.yaml: the FenceConfig, to apply once the hosts are in it;
//   - baseline.yaml: the Cilium baseline (config/components/cilium-baseline),
//     for clusters that run Cilium;
//   - kubectl-fence-image.oci.tar: kubectl fence's images, as the
//     webhook's, for the policy reports' CronJob;
//   - policyreports.yaml: that CronJob and its RBAC
//     (config/components/policy-reports) with that index pinned by digest,
//     for clusters that serve openreports.io;
//   - sandbox-fence-<version>.tgz: the Helm chart (hack/chart) with that
//     version and both images;
//   - webhook.spdx.json: an SPDX 2.3 SBOM of the webhook binary from its
//     own build information (main module and every dependency, with
//     versions and the SHA-256 of each module's zip);
//   - kubectl-fence_<os>_<arch>.tar.gz for each of PluginPlatforms (each
//     of -platforms), and
//     kubectl-fence.yaml, their krew manifest (docs/kubectl-fence.md);
//   - provenance.intoto.json: an in-toto statement of SLSA provenance
//     naming every file above by SHA-256 (provenance.go);
//   - SHA256SUMS over all of them.
//
// Two runs over the same commit write the same bytes: binaries are built
// with -trimpath -buildvcs=false, every timestamp is SOURCE_DATE_EPOCH
// (the commit time unless set), and TestReleaseIsReproducible checks it.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"sigs.k8s.io/kustomize/api/resmap"

	"github.com/sandbox-fence/sandbox-fence/hack/kustomize"
)

// SignatureFile is the Sigstore bundle of SHA256SUMS's signature: make
// release-sign writes it with a key, the release workflow keyless; it is
// not among Files because make release alone does not sign.
const SignatureFile = "SHA256SUMS.sigstore.json"

// DefaultImage is where the release workflow pushes the index unless told
// otherwise (RELEASE_IMAGE).
const DefaultImage = "ghcr.io/sandbox-fence/sandbox-fence-webhook"

// DefaultReportsImage is where the release workflow pushes kubectl fence's
// index unless told otherwise (RELEASE_REPORTS_IMAGE).
const DefaultReportsImage = "ghcr.io/sandbox-fence/kubectl-fence"

// devImage and devReportsImage are the images config/ names; a release
// replaces them.
const (
	devImage        = "sandbox-fence/webhook"
	devReportsImage = "sandbox-fence/kubectl-fence"
)

var semver = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

// Files are the names a release of chartVersion (VERSION without its v)
// consists of, in name order: what run writes into -out and what
// .github/workflows/release.yml attaches to the GitHub release
// (TestTheWorkflowAttachesEveryReleaseFile).
func Files(chartVersion string) []string { return filesFor(chartVersion, PluginPlatforms) }

// filesFor is Files with kubectl fence's archives for plugins only.
func filesFor(chartVersion string, plugins []string) []string {
	files := []string{"SHA256SUMS", "baseline.yaml", "fenceconfig.yaml", "install.yaml", "kubectl-fence-image.oci.tar", "kubectl-fence.yaml",
		"policyreports.yaml", "provenance.intoto.json", "sandbox-fence-" + chartVersion + ".tgz", "webhook-image.oci.tar", "webhook.spdx.json"}
	for _, p := range plugins {
		files = append(files, PluginArchive(p))
	}
	slices.Sort(files)
	return files
}

type options struct {
	Version string // vX.Y.Z
	Image   string // repository, without tag or digest
	// ReportsImage is kubectl fence's repository, as Image.
	ReportsImage string
	Out          string // directory written
	Root         string // repository checkout
	DownloadURL  string // where the plugin's archives are published, per version
	// Platforms are what is built: the webhook image for each linux one,
	// kubectl fence for each; nil means PluginPlatforms, a release. The
	// tests build this machine's architecture only: each platform is a
	// cold compile of every package the webhook links.
	Platforms []string
}

func (o options) platforms() []string {
	if o.Platforms == nil {
		return PluginPlatforms
	}
	return o.Platforms
}

// imagePlatforms are the linux entries of platforms: the webhook image's.
func (o options) imagePlatforms() []string {
	var linux []string
	for _, p := range o.platforms() {
		if strings.HasPrefix(p, "linux/") {
			linux = append(linux, p)
		}
	}
	return linux
}

func main() {
	var o options
	flag.StringVar(&o.Version, "version", "", "Release version, vX.Y.Z (required).")
	flag.StringVar(&o.Image, "image", DefaultImage, "Image repository the index is pushed to; install.yaml pins it by digest.")
	flag.StringVar(&o.ReportsImage, "reports-image", DefaultReportsImage, "Image repository kubectl fence's index is pushed to; policyreports.yaml and the chart pin it by digest.")
	flag.StringVar(&o.Out, "out", "dist", "Directory to write the release into (replaced).")
	flag.StringVar(&o.Root, "root", ".", "Repository checkout.")
	flag.StringVar(&o.DownloadURL, "download-url", DefaultDownloadURL, "URL under which <version>/<archive> of kubectl fence is published (the krew manifest names it).")
	platforms := flag.String("platforms", strings.Join(PluginPlatforms, ","), "Platforms (os/arch, comma-separated) to build: the webhook image for the linux ones, kubectl fence for each; a published release has them all.")
	flag.Parse()
	for _, p := range strings.Split(*platforms, ",") {
		if !slices.Contains(PluginPlatforms, p) {
			fmt.Fprintf(os.Stderr, "release: -platforms: %q is none of %s\n", p, strings.Join(PluginPlatforms, ", "))
			os.Exit(2)
		}
		o.Platforms = append(o.Platforms, p)
	}
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if !semver.MatchString(o.Version) {
		return fmt.Errorf("-version %q: want vMAJOR.MINOR.PATCH[-PRERELEASE], e.g. make release VERSION=v0.1.0", o.Version)
	}
	for _, f := range []struct{ flag, repo, example string }{{"-image", o.Image, DefaultImage}, {"-reports-image", o.ReportsImage, DefaultReportsImage}} {
		if f.repo == "" || strings.ContainsAny(f.repo, "@") || strings.Contains(f.repo[strings.LastIndex(f.repo, "/")+1:], ":") {
			return fmt.Errorf("%s %q: want a repository without tag or digest, e.g. %s", f.flag, f.repo, f.example)
		}
	}
	images := o.imagePlatforms()
	if len(images) == 0 {
		return fmt.Errorf("-platforms %v: the webhook image needs a linux platform among them", o.platforms())
	}
	root, err := filepath.Abs(o.Root)
	if err != nil {
		return err
	}
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		out, err := exec.CommandContext(ctx, "git", "-C", root, "log", "-1", "--format=%ct").Output()
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH unset and no commit time from git: %w", err)
		}
		epoch = strings.TrimSpace(string(out))
	}
	var secs int64
	if _, err := fmt.Sscan(epoch, &secs); err != nil {
		return fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", epoch, err)
	}
	when := time.Unix(secs, 0).UTC()

	out, err := filepath.Abs(o.Out)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "sandbox-fence-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	env := append(os.Environ(), "SOURCE_DATE_EPOCH="+epoch)
	digestFile := filepath.Join(work, "digest")
	// hack/image is this module's; it builds the webhook from the root
	// module, so it runs from the repository's root.
	imageTool := filepath.Join(work, "image")
	if err := goRun(ctx, filepath.Join(root, "hack"), env, "build", "-o", imageTool, "./image"); err != nil {
		return err
	}
	index := func(file, repo string, args ...string) (string, error) {
		image := exec.CommandContext(ctx, imageTool, append([]string{"-oci", filepath.Join(out, file),
			"-platforms", strings.Join(images, ","), "-version", o.Version, "-digest-file", digestFile}, args...)...)
		image.Dir, image.Env, image.Stdout, image.Stderr = root, env, os.Stderr, os.Stderr
		if err := image.Run(); err != nil {
			return "", fmt.Errorf("hack/image (in %s): %w", root, err)
		}
		d, err := os.ReadFile(digestFile)
		if err != nil {
			return "", err
		}
		return repo + "@" + strings.TrimSpace(string(d)), nil
	}
	pinned, err := index("webhook-image.oci.tar", o.Image, "-bin-dir", work)
	if err != nil {
		return err
	}
	// kubectl fence's image, as the plugin's archives are built.
	reportsPinned, err := index("kubectl-fence-image.oci.tar", o.ReportsImage, "-pkg", "./cmd/kubectl-fence",
		"-entrypoint", "/kubectl-fence", "-title", "kubectl fence", "-ldflags", "-X "+versionFlag+"="+o.Version)
	if err != nil {
		return err
	}

	manifest, config, err := installYAML(root, o.Version, pinned)
	if err != nil {
		return err
	}
	reports, err := policyReportsYAML(root, o.Version, reportsPinned)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "policyreports.yaml"), reports, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "install.yaml"), manifest, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "fenceconfig.yaml"), config, 0o644); err != nil {
		return err
	}
	baseline, err := os.ReadFile(filepath.Join(root, "config", "components", "cilium-baseline", "baseline.yaml"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "baseline.yaml"), baseline, 0o644); err != nil {
		return err
	}

	if err := goRun(ctx, filepath.Join(root, "hack", "chart"), env, "run", ".", "-root", root,
		"-version", strings.TrimPrefix(o.Version, "v"), "-image", pinned, "-reports-image", reportsPinned,
		"-package", filepath.Join(out, "sandbox-fence-"+strings.TrimPrefix(o.Version, "v")+".tgz")); err != nil {
		return err
	}

	modcache, err := goEnv(ctx, env, "GOMODCACHE")
	if err != nil {
		return err
	}
	bins := map[string]string{}
	for _, p := range images {
		bins[p] = filepath.Join(work, "webhook-"+strings.Replace(p, "/", "-", 1))
	}
	sbom, err := spdx(o.Version, pinned, modcache, when, bins)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "webhook.spdx.json"), sbom, 0o644); err != nil {
		return err
	}
	downloadURL := o.DownloadURL
	if downloadURL == "" {
		downloadURL = DefaultDownloadURL
	}
	if err := writePlugin(ctx, root, work, out, o.Version, downloadURL, env, when, o.platforms()); err != nil {
		return err
	}
	prov, err := provenance(ctx, root, out, o.Version, o.Image, env)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, ProvenanceFile), prov, 0o644); err != nil {
		return err
	}
	sums, err := sha256sums(out)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "SHA256SUMS"), sums, 0o644); err != nil {
		return err
	}
	// The workflow attaches Files' list, not the directory: a file written
	// here but not listed would be left out of the release.
	entries, err := os.ReadDir(out)
	if err != nil {
		return err
	}
	var wrote []string
	for _, e := range entries {
		wrote = append(wrote, e.Name())
	}
	if want := filesFor(strings.TrimPrefix(o.Version, "v"), o.platforms()); !slices.Equal(wrote, want) {
		return fmt.Errorf("wrote %v into %s, but a release is %v (Files)", wrote, out, want)
	}
	fmt.Printf("release %s in %s: image %s\n", o.Version, out, pinned)
	return nil
}

func goRun(ctx context.Context, dir string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s (in %s): %w", strings.Join(args, " "), dir, err)
	}
	return nil
}

// installYAML renders config/default with the image pinned and splits it
// in two. install.yaml is everything but the FenceConfig, in the order one
// `kubectl apply -f` needs on an empty cluster: the CRD and the Namespace
// before anything that lives in or refers to them. kubectl cannot map an
// object of a CRD it creates in the same apply, so the FenceConfig (the
// shipped default: no hosts) is fenceconfig.yaml, applied once the admin
// has bound the hosts; until then no policy needs it (every binding's
// parameterNotFoundAction is Allow) and no namespace is opted in.
func installYAML(root, version, image string) (install, config []byte, err error) {
	m, err := build(root, map[string]any{"resources": []string{"config/default"}}, devImage, image)
	if err != nil {
		return nil, nil, err
	}
	rank := func(kind string) int {
		switch kind {
		case "CustomResourceDefinition":
			return 0
		case "Namespace":
			return 1
		}
		return 2
	}
	res := m.Resources()
	sort.SliceStable(res, func(i, j int) bool { return rank(res[i].GetKind()) < rank(res[j].GetKind()) })
	var inst, cfg bytes.Buffer
	fmt.Fprintf(&inst, "# sandbox-fence %s: config/default with the webhook image %s, but its FenceConfig (fenceconfig.yaml).\n", version, image)
	inst.WriteString("# kubectl apply --server-side -f install.yaml   (docs/install.md, \"Install from a release\")\n")
	fmt.Fprintf(&cfg, "# sandbox-fence %s: the default FenceConfig, binding no host. Add your hosts (docs/install.md, \"Configure\"),\n", version)
	cfg.WriteString("# then: kubectl apply --server-side -f fenceconfig.yaml\n")
	for _, r := range res {
		y, err := r.AsYAML()
		if err != nil {
			return nil, nil, err
		}
		b := &inst
		if r.GetGvk().Group == "fence.sandbox.namzu.ai" {
			b = &cfg
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return inst.Bytes(), cfg.Bytes(), nil
}

// policyReportsYAML renders config/components/policy-reports with kubectl
// fence's image pinned: the CronJob an install.yaml install adds for
// policy reports (docs/kubectl-fence.md, Policy reports).
func policyReportsYAML(root, version, image string) ([]byte, error) {
	m, err := build(root, map[string]any{"components": []string{"config/components/policy-reports"}}, devReportsImage, image)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# sandbox-fence %s: the policy reports' CronJob (config/components/policy-reports) with kubectl fence's image %s.\n", version, image)
	b.WriteString("# Needs install.yaml and openreports.io's CRDs; kubectl apply --server-side -f policyreports.yaml   (docs/kubectl-fence.md, \"Policy reports\")\n")
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			return nil, err
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.Bytes(), nil
}

// build runs kustomize on k (a kustomization beside config/) with the image
// named dev replaced by pinned, repository@digest.
func build(root string, k map[string]any, dev, pinned string) (resmap.ResMap, error) {
	repo, digest, _ := strings.Cut(pinned, "@")
	k["apiVersion"], k["kind"] = "kustomize.config.k8s.io/v1beta1", "Kustomization"
	k["images"] = []map[string]string{{"name": dev, "newName": repo, "digest": digest}}
	return kustomize.Build(filepath.Join(root, "config"), k)
}

// spdx describes the webhook binaries from the build information the Go
// linker put into them: the main module and each dependency with its
// version, the SHA-256 of its zip as the module proxy serves it and its
// go.sum hash as a comment, and each binary's own SHA-256.
func spdx(version, image, modcache string, created time.Time, bins map[string]string) ([]byte, error) {
	var info *debug.BuildInfo
	type file struct {
		Name      string     `json:"fileName"`
		SPDXID    string     `json:"SPDXID"`
		Checksums []checksum `json:"checksums"`
	}
	var files []file
	platforms := slices.Sorted(maps.Keys(bins))
	for _, p := range platforms {
		bi, err := buildinfo.ReadFile(bins[p])
		if err != nil {
			return nil, fmt.Errorf("build information of %s: %w", bins[p], err)
		}
		if info == nil {
			info = bi
		}
		b, err := os.ReadFile(bins[p])
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		files = append(files, file{
			Name:      "./webhook (" + p + ")",
			SPDXID:    "SPDXRef-File-webhook-" + strings.ReplaceAll(p, "/", "-"),
			Checksums: []checksum{{"SHA256", hex.EncodeToString(sum[:])}},
		})
	}
	mods := append([]*debug.Module{&info.Main}, info.Deps...)
	var pkgs []pkg
	var rels []rel
	for i, m := range mods {
		// A module replaced by a directory (pkg/fence, the host library) is
		// built from the checkout, as the main module is: (devel).
		fromCheckout := i == 0 || m.Replace != nil && m.Replace.Version == ""
		for m.Replace != nil && m.Replace.Version != "" {
			m = m.Replace
		}
		v := m.Version
		if fromCheckout {
			v = version
		}
		p := pkg{
			Name:             m.Path,
			SPDXID:           fmt.Sprintf("SPDXRef-Package-%d", i),
			Version:          v,
			DownloadLocation: "NOASSERTION",
			FilesAnalyzed:    false,
			ExternalRefs: []extRef{{
				Category: "PACKAGE-MANAGER", Type: "purl",
				Locator: "pkg:golang/" + m.Path + "@" + v,
			}},
		}
		if m.Sum != "" && !fromCheckout {
			// The go.sum hash (h1) is a SHA-256 of the module's file list,
			// no hash of any file: SPDX has no algorithm for it, so it is a
			// comment, and the checksum is that of the zip the module proxy
			// serves, the copy the go command verified against it.
			zip, sum, err := moduleZip(modcache, m.Path, m.Version)
			if err != nil {
				return nil, err
			}
			p.DownloadLocation = zip
			p.Checksums = []checksum{{"SHA256", sum}}
			p.Comment = "go.sum hash " + m.Sum
		}
		if fromCheckout {
			p.DownloadLocation = "git+https://github.com/sandbox-fence/sandbox-fence@" + version
		}
		if i == 0 {
			p.Comment = "the webhook (cmd/webhook), image " + image + "; Go " + info.GoVersion
			p.DownloadLocation = "git+https://github.com/sandbox-fence/sandbox-fence@" + version
			rels = append(rels, rel{"SPDXRef-DOCUMENT", "DESCRIBES", p.SPDXID})
			for _, f := range files {
				rels = append(rels, rel{p.SPDXID, "CONTAINS", f.SPDXID})
			}
		} else {
			rels = append(rels, rel{"SPDXRef-Package-0", "DEPENDS_ON", p.SPDXID})
		}
		pkgs = append(pkgs, p)
	}
	doc := map[string]any{
		"spdxVersion":       "SPDX-2.3",
		"dataLicense":       "CC0-1.0",
		"SPDXID":            "SPDXRef-DOCUMENT",
		"name":              "sandbox-fence-webhook-" + version,
		"documentNamespace": "https://github.com/sandbox-fence/sandbox-fence/releases/" + version + "/webhook.spdx.json#" + image[strings.Index(image, "@")+1:],
		"creationInfo": map[string]any{
			"created":  created.Format(time.RFC3339),
			"creators": []string{"Tool: sandbox-fence hack/release"},
		},
		"packages":      pkgs,
		"files":         files,
		"relationships": rels,
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// moduleZip returns the module proxy's URL of a module version's zip and
// the SHA-256 of the copy in the Go module cache modcache, which the go
// command downloaded from the proxy and verified against go.sum while it
// built the binaries.
func moduleZip(modcache, path, version string) (url, sum string, err error) {
	ep, err := module.EscapePath(path)
	if err != nil {
		return "", "", err
	}
	ev, err := module.EscapeVersion(version)
	if err != nil {
		return "", "", err
	}
	zip := filepath.Join(modcache, "cache", "download", filepath.FromSlash(ep), "@v", ev+".zip")
	b, err := os.ReadFile(zip)
	if err != nil {
		return "", "", fmt.Errorf("the zip of %s@%s, which the SBOM's checksum is taken from: %w", path, version, err)
	}
	h := sha256.Sum256(b)
	return "https://proxy.golang.org/" + ep + "/@v/" + ev + ".zip", hex.EncodeToString(h[:]), nil
}

type checksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type extRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type pkg struct {
	Name             string     `json:"name"`
	SPDXID           string     `json:"SPDXID"`
	Version          string     `json:"versionInfo"`
	DownloadLocation string     `json:"downloadLocation"`
	FilesAnalyzed    bool       `json:"filesAnalyzed"`
	Checksums        []checksum `json:"checksums,omitempty"`
	ExternalRefs     []extRef   `json:"externalRefs"`
	Comment          string     `json:"comment,omitempty"`
}

type rel struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// sha256sums is `sha256sum *` over dir's files, sorted by name.
func sha256sums(dir string) ([]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	for _, e := range entries {
		if e.IsDir() || e.Name() == "SHA256SUMS" {
			continue
		}
		c, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%x  %s\n", sha256.Sum256(c), e.Name())
	}
	return b.Bytes(), nil
}
