package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	slsa "github.com/in-toto/attestation/go/predicates/provenance/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	"golang.org/x/mod/sumdb/dirhash"
	"google.golang.org/protobuf/encoding/protojson"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"

	"github.com/sandbox-fence/sandbox-fence/hack/chart/render"
	"github.com/sandbox-fence/sandbox-fence/internal/kubeversion"
)

// testVersion is the VERSION the tests release.
const testVersion = "v0.0.1-test"

var (
	shared struct {
		once sync.Once
		dir  string // the release's -out
		err  error
	}
	sharedRoot string // removed after the tests
)

func TestMain(m *testing.M) {
	os.Unsetenv("SOURCE_DATE_EPOCH") // from the commit, as make release does
	// The go commands a release runs get make's build configuration
	// (Makefile: CGO_ENABLED=0, GOFLAGS with -trimpath), so they reuse what
	// make and the other tests compiled.
	os.Setenv("CGO_ENABLED", "0")
	if f := os.Getenv("GOFLAGS"); !slices.Contains(strings.Fields(f), "-trimpath") {
		os.Setenv("GOFLAGS", strings.TrimSpace(f+" -trimpath"))
	}
	code := m.Run()
	if sharedRoot != "" {
		os.RemoveAll(sharedRoot)
	}
	os.Exit(code)
}

// testPlatforms are the platforms the tests build: this machine's
// architecture on Linux, the webhook image and kubectl fence. Each other
// platform is a cold compile of every package the webhook links (the
// longest step of a cold make test); make release builds them all, and
// checks each executable's header (writePlugin).
var testPlatforms = []string{"linux/" + runtime.GOARCH}

// release is one make release of testVersion for testPlatforms, built once
// for every test that reads its files.
func release(t *testing.T) string {
	t.Helper()
	shared.once.Do(func() {
		sharedRoot, shared.err = os.MkdirTemp("", "sandbox-fence-release-test-")
		if shared.err != nil {
			return
		}
		shared.dir = filepath.Join(sharedRoot, "dist")
		shared.err = run(context.Background(), options{Version: testVersion, Image: DefaultImage, ReportsImage: DefaultReportsImage, Out: shared.dir, Root: "../..", Platforms: testPlatforms})
	})
	if shared.err != nil {
		t.Fatalf("make release VERSION=%s: %v", testVersion, shared.err)
	}
	return shared.dir
}

// binTool is the absolute path of a tool make builds into bin/ from the Go
// module proxy (make <name>).
func binTool(t *testing.T, name string) string {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("..", "..", "bin", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%v: run make %s (it builds %s from the Go module proxy)", err, name, name)
	}
	return path
}

func readFile(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var pinnedImage = regexp.MustCompile(`(?m)^ +image: (\S+)$`)

// pinned is the one image install.yaml runs, and its digest.
func pinned(t *testing.T, dir string) (ref, digest string) {
	t.Helper()
	return pinnedIn(t, dir, "install.yaml", DefaultImage)
}

// pinnedIn is the one image file runs, repo@sha256:..., and its digest.
func pinnedIn(t *testing.T, dir, file, repo string) (ref, digest string) {
	t.Helper()
	var refs []string
	for _, m := range pinnedImage.FindAllStringSubmatch(string(readFile(t, dir, file)), -1) {
		if !slices.Contains(refs, m[1]) {
			refs = append(refs, m[1])
		}
	}
	if len(refs) != 1 {
		t.Fatalf("%s runs images %v, want one", file, refs)
	}
	r, d, ok := strings.Cut(refs[0], "@")
	if !ok || r != repo || !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(d) {
		t.Fatalf("%s runs %s, want %s pinned by digest", file, refs[0], repo)
	}
	return refs[0], d
}

// Two releases of the same commit into two directories are identical, byte
// for byte (SHA256SUMS equal), and hold every file the workflow attaches.
// Builds the webhook twice (cached after the first run).
func TestReleaseIsReproducible(t *testing.T) {
	first := release(t)
	second := filepath.Join(t.TempDir(), "dist")
	if err := run(context.Background(), options{Version: testVersion, Image: DefaultImage, ReportsImage: DefaultReportsImage, Out: second, Root: "../..", Platforms: testPlatforms}); err != nil {
		t.Fatal(err)
	}
	var sums []string
	for _, out := range []string{first, second} {
		sums = append(sums, string(readFile(t, out, "SHA256SUMS")))
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(sums[0]), "\n") {
		names = append(names, strings.Fields(line)[1])
	}
	want := []string{"baseline.yaml", "fenceconfig.yaml", "install.yaml", "kubectl-fence-image.oci.tar", "kubectl-fence.yaml",
		"policyreports.yaml", "provenance.intoto.json", "sandbox-fence-0.0.1-test.tgz", "webhook-image.oci.tar", "webhook.spdx.json"}
	for _, p := range testPlatforms {
		want = append(want, PluginArchive(p))
	}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("release files %v, want %v", names, want)
	}
	if want := append([]string{"SHA256SUMS"}, want...); !slices.Equal(filesFor("0.0.1-test", testPlatforms), want) {
		t.Errorf("filesFor = %v, want %v", filesFor("0.0.1-test", testPlatforms), want)
	}
	// What the workflow attaches: the same, with every platform's archive.
	if got, want := Files("0.0.1-test"), []string{"SHA256SUMS", "baseline.yaml", "fenceconfig.yaml", "install.yaml", "kubectl-fence-image.oci.tar", "kubectl-fence.yaml",
		"kubectl-fence_darwin_amd64.tar.gz", "kubectl-fence_darwin_arm64.tar.gz", "kubectl-fence_linux_amd64.tar.gz", "kubectl-fence_linux_arm64.tar.gz",
		"policyreports.yaml", "provenance.intoto.json", "sandbox-fence-0.0.1-test.tgz", "webhook-image.oci.tar", "webhook.spdx.json"}; !slices.Equal(got, want) {
		t.Errorf("Files = %v, want %v", got, want)
	}
	inst := readFile(t, first, "install.yaml")
	pinned(t, first)
	// One kubectl apply cannot create a CRD and an object of it:
	// install.yaml holds no FenceConfig, fenceconfig.yaml only it.
	cfg := readFile(t, first, "fenceconfig.yaml")
	if n := strings.Count(string(inst), "\nkind: FenceConfig\n"); n != 0 {
		t.Errorf("install.yaml holds %d FenceConfig objects; one kubectl apply of it would fail to map them", n)
	}
	if n := strings.Count(string(cfg), "\nkind: FenceConfig\n"); n != 1 || strings.Count(string(cfg), "\nkind: ") != 1 {
		t.Errorf("fenceconfig.yaml holds %d FenceConfig objects of %d, want the one and nothing else:\n%s", n, strings.Count(string(cfg), "\nkind: "), cfg)
	}
	if sums[0] != sums[1] {
		t.Errorf("two releases of one commit differ:\n%s\n%s", sums[0], sums[1])
	}
}

// imageIndex opens the release's OCI image-layout tarball as crane push
// --index reads it (unpacked), and returns its index.
func imageIndex(t *testing.T, dir, file string) v1.ImageIndex {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lay := t.TempDir()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(lay, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, lay+string(filepath.Separator)) {
			t.Fatalf("%s: entry %q outside the layout", file, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(p, b, 0o644)
			}
		default:
			t.Fatalf("%s: entry %q of type %c", file, h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	idx, err := layout.ImageIndexFromPath(lay)
	if err != nil {
		t.Fatalf("%s is no OCI image layout: %v", file, err)
	}
	return idx
}

// binary is /name of img, the binary the image runs.
func binary(t *testing.T, img v1.Image, name string) []byte {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("the image holds no /%s", name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimPrefix(h.Name, "/") == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

// Each image index holds exactly one image per linux platform built
// (docs/install.md, "Install from a release": the nodes pull theirs by the
// index's digest; a release has linux/amd64 and linux/arm64), each of an
// OCI manifest whose configuration says the same platform: the webhook's,
// which install.yaml pins, and kubectl fence's, which policyreports.yaml
// pins and whose binary says the release's version.
func TestReleaseImageIndexHoldsOneImagePerPlatform(t *testing.T) {
	dir := release(t)
	for _, tc := range []struct{ index, pinnedBy, repo, binary string }{
		{"webhook-image.oci.tar", "install.yaml", DefaultImage, "webhook"},
		{"kubectl-fence-image.oci.tar", "policyreports.yaml", DefaultReportsImage, "kubectl-fence"},
	} {
		t.Run(tc.index, func(t *testing.T) {
			_, digest := pinnedIn(t, dir, tc.pinnedBy, tc.repo)
			idx := imageIndex(t, dir, tc.index)
			d, err := idx.Digest()
			if err != nil {
				t.Fatal(err)
			}
			if d.String() != digest {
				t.Errorf("the OCI layout's index is %s, %s pins %s", d, tc.pinnedBy, digest)
			}
			im, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if im.MediaType != types.OCIImageIndex {
				t.Errorf("index media type %s, want %s", im.MediaType, types.OCIImageIndex)
			}
			type entry struct {
				MediaType          types.MediaType
				Platform, Declared string // the index's descriptor; the image's configuration
			}
			var got []entry
			for _, m := range im.Manifests {
				e := entry{MediaType: m.MediaType}
				if m.Platform != nil {
					e.Platform = m.Platform.OS + "/" + m.Platform.Architecture + m.Platform.Variant
				}
				img, err := idx.Image(m.Digest)
				if err != nil {
					t.Fatalf("%s (%s): %v", m.Digest, e.Platform, err)
				}
				cf, err := img.ConfigFile()
				if err != nil {
					t.Fatal(err)
				}
				e.Declared = cf.OS + "/" + cf.Architecture + cf.Variant
				got = append(got, e)
				if tc.binary == "kubectl-fence" && e.Platform == runtime.GOOS+"/"+runtime.GOARCH {
					bin := filepath.Join(t.TempDir(), tc.binary)
					if err := os.WriteFile(bin, binary(t, img, tc.binary), 0o755); err != nil {
						t.Fatal(err)
					}
					out, err := exec.Command(bin, "version", "--client").CombinedOutput()
					if err != nil || !strings.Contains(string(out), testVersion) {
						t.Errorf("the image's kubectl fence version --client: %v, want %s:\n%s", err, testVersion, out)
					}
				}
			}
			var want []entry
			for _, p := range testPlatforms {
				want = append(want, entry{types.OCIManifestSchema1, p, p})
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("the index's manifests (-want +got):\n%s", diff)
			}
		})
	}
}

// spdxDoc is the part of an SPDX 2.3 JSON document the release promises.
type spdxDoc struct {
	SPDXVersion       string `json:"spdxVersion"`
	DocumentNamespace string `json:"documentNamespace"`
	Packages          []struct {
		Name      string         `json:"name"`
		Version   string         `json:"versionInfo"`
		Location  string         `json:"downloadLocation"`
		Checksums []spdxChecksum `json:"checksums"`
	} `json:"packages"`
	Files []struct {
		Name      string         `json:"fileName"`
		Checksums []spdxChecksum `json:"checksums"`
	} `json:"files"`
}

type spdxChecksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

// webhook.spdx.json is an SPDX 2.3 document with a namespace of its own
// whose packages are exactly the modules the shipped binaries' build
// information lists (go version -m /webhook): the main module at the
// release's version and every dependency, replacements followed, at its
// version; and whose files are those binaries, by SHA-256.
func TestReleaseSBOMListsTheBinarysModules(t *testing.T) {
	dir := release(t)
	var doc spdxDoc
	if err := json.Unmarshal(readFile(t, dir, "webhook.spdx.json"), &doc); err != nil {
		t.Fatalf("webhook.spdx.json: %v", err)
	}
	if doc.SPDXVersion != "SPDX-2.3" {
		t.Errorf("spdxVersion %q, want SPDX-2.3", doc.SPDXVersion)
	}
	if u, err := url.Parse(doc.DocumentNamespace); err != nil || u.Scheme != "https" || u.Host == "" || !strings.Contains(doc.DocumentNamespace, testVersion) {
		t.Errorf("documentNamespace %q: want a unique https URI naming the release", doc.DocumentNamespace)
	}
	got := map[string]string{}
	zips := map[string]string{} // module path → the zip its checksum is of
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range doc.Packages {
		if v, dup := got[p.Name]; dup {
			t.Errorf("package %s listed twice (%s, %s)", p.Name, v, p.Version)
		}
		got[p.Name] = p.Version
		if zip, ok := strings.CutPrefix(p.Location, "https://proxy.golang.org/"); ok {
			zip = filepath.Join(strings.TrimSpace(string(modcache)), "cache", "download", filepath.FromSlash(zip))
			zips[p.Name] = zip
			sum := sha256.Sum256(readFile(t, filepath.Dir(zip), filepath.Base(zip)))
			if len(p.Checksums) != 1 || p.Checksums[0].Algorithm != "SHA256" || p.Checksums[0].Value != hex.EncodeToString(sum[:]) {
				t.Errorf("package %s: checksums %+v, want the SHA-256 of %s, %x", p.Name, p.Checksums, p.Location, sum)
			}
		}
	}
	gotFiles := map[string]string{}
	for _, f := range doc.Files {
		for _, c := range f.Checksums {
			if c.Algorithm == "SHA256" {
				gotFiles[f.Name] = c.Value
			}
		}
	}

	idx := imageIndex(t, dir, "webhook-image.oci.tar")
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) == 0 {
		t.Fatal("the index holds no image")
	}
	wantFiles := map[string]string{}
	for _, m := range im.Manifests {
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		bin := binary(t, img, "webhook")
		platform := m.Platform.OS + "/" + m.Platform.Architecture
		sum := sha256.Sum256(bin)
		wantFiles["./webhook ("+platform+")"] = hex.EncodeToString(sum[:])
		bi, err := buildinfo.Read(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("%s: build information of /webhook: %v", platform, err)
		}
		want := map[string]string{bi.Main.Path: testVersion}
		for _, d := range bi.Deps {
			if d.Replace != nil && d.Replace.Version == "" {
				want[d.Path] = testVersion // the host library, from the checkout
				continue
			}
			for d.Replace != nil {
				d = d.Replace
			}
			want[d.Path] = d.Version
			// The zip checksummed is the one go.sum vouches for.
			if h1, err := dirhash.HashZip(zips[d.Path], dirhash.Hash1); d.Sum != "" && (err != nil || h1 != d.Sum) {
				t.Errorf("package %s: the zip the SBOM checksums (%s) hashes to %s, %v; the binary's go.sum hash is %s", d.Path, zips[d.Path], h1, err, d.Sum)
			}
		}
		if len(bi.Deps) == 0 {
			t.Errorf("%s: /webhook's build information lists no dependency", platform)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("webhook.spdx.json's packages against %s /webhook's build information, name → version (-binary +SBOM):\n%s", platform, diff)
		}
	}
	if diff := cmp.Diff(wantFiles, gotFiles); diff != "" {
		t.Errorf("webhook.spdx.json's files against the images' /webhook, SHA-256 (-images +SBOM):\n%s", diff)
	}
}

// The release workflow attaches every file of a release to the GitHub
// release, and its keyless signature, and no other: a file left out is
// never published.
func TestTheWorkflowAttachesEveryReleaseFile(t *testing.T) {
	var attached []string
	for _, line := range strings.Split(string(readFile(t, "../../.github/workflows", "release.yml")), "\n") {
		if args, ok := strings.CutPrefix(strings.TrimSpace(line), "run: gh release create "); ok {
			for _, a := range strings.Fields(args) {
				if f, ok := strings.CutPrefix(strings.Trim(a, `"`), "dist/"); ok {
					attached = append(attached, f)
				}
			}
		}
	}
	slices.Sort(attached)
	want := append(Files("${GITHUB_REF_NAME#v}"), SignatureFile) // the workflow signs keyless
	slices.Sort(want)
	if d := cmp.Diff(want, attached); d != "" {
		t.Errorf("files release.yml attaches against Files (-Files +attached):\n%s", d)
	}
}

// provenance.intoto.json is an in-toto statement, valid by in-toto's own
// Go types, of SLSA provenance v1 for the commit checked out, whose
// subjects are every other file SHA256SUMS lists, with the same digests.
func TestReleaseProvenanceNamesEveryFileAndTheCommit(t *testing.T) {
	dir := release(t)
	var st intoto.Statement
	if err := protojson.Unmarshal(readFile(t, dir, ProvenanceFile), &st); err != nil {
		t.Fatal(err)
	}
	if err := st.Validate(); err != nil || st.GetPredicateType() != "https://slsa.dev/provenance/v1" {
		t.Fatalf("statement: %v, predicateType %q", err, st.GetPredicateType())
	}
	var want, got []string
	for _, line := range strings.Split(strings.TrimSpace(string(readFile(t, dir, "SHA256SUMS"))), "\n") {
		if f := strings.Fields(line); f[1] != ProvenanceFile {
			want = append(want, f[1]+" sha256:"+f[0])
		}
	}
	for _, s := range st.GetSubject() {
		got = append(got, s.GetName()+" sha256:"+s.GetDigest()["sha256"])
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("subjects against SHA256SUMS (-SHA256SUMS +subjects):\n%s", d)
	}
	var pred slsa.Provenance
	b, _ := protojson.Marshal(st.GetPredicate())
	if err := protojson.Unmarshal(b, &pred); err != nil || pred.Validate() != nil {
		t.Fatalf("predicate: %v, %v", err, pred.Validate())
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	deps := pred.GetBuildDefinition().GetResolvedDependencies()
	if len(deps) != 1 || deps[0].GetDigest()["gitCommit"] != strings.TrimSpace(string(head)) {
		t.Errorf("resolvedDependencies %v, want the commit checked out, %s", deps, head)
	}
}

// chartFiles reads the packaged chart: path under sandbox-fence/ → content.
func chartFiles(t *testing.T, pkg string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	untar(t, pkg, func(h *tar.Header, body []byte) {
		name, ok := strings.CutPrefix(h.Name, "sandbox-fence/")
		if !ok {
			t.Errorf("%s: entry %q outside sandbox-fence/, where helm install looks", pkg, h.Name)
			return
		}
		out[name] = body
	})
	return out
}

// untar calls each with every entry of the gzip-compressed tar archive.
func untar(t *testing.T, archive string, each func(h *tar.Header, body []byte)) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", archive, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		each(h, body)
	}
}

// The release's chart is chart version VERSION without its v (appVersion
// too: hack/chart sets both), its values run the image install.yaml pins,
// Helm renders that image with the default values, and Helm's linter finds
// nothing above INFO in the package.
func TestReleaseChart(t *testing.T) {
	dir := release(t)
	ref, digest := pinned(t, dir)
	chartVersion := strings.TrimPrefix(testVersion, "v")
	pkg := filepath.Join(dir, "sandbox-fence-"+chartVersion+".tgz")
	files := chartFiles(t, pkg)

	var meta struct {
		Name       string `json:"name"`
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(files["Chart.yaml"], &meta); err != nil {
		t.Fatalf("Chart.yaml: %v", err)
	}
	if got, want := []string{meta.Name, meta.Version, meta.AppVersion}, []string{"sandbox-fence", chartVersion, chartVersion}; !slices.Equal(got, want) {
		t.Errorf("Chart.yaml name, version, appVersion = %q, want %q", got, want)
	}
	type image struct {
		Repository string `json:"repository"`
		Digest     string `json:"digest"`
	}
	var vals struct {
		Image         image `json:"image"`
		PolicyReports struct {
			Image image `json:"image"`
		} `json:"policyReports"`
	}
	if err := yaml.Unmarshal(files["values.yaml"], &vals); err != nil {
		t.Fatalf("values.yaml: %v", err)
	}
	if got := vals.Image.Repository + "@" + vals.Image.Digest; vals.Image.Digest != digest || got != ref {
		t.Errorf("values.yaml image %s, install.yaml pins %s", got, ref)
	}
	reportsRef, _ := pinnedIn(t, dir, "policyreports.yaml", DefaultReportsImage)
	if got := vals.PolicyReports.Image.Repository + "@" + vals.PolicyReports.Image.Digest; got != reportsRef {
		t.Errorf("values.yaml policyReports.image %s, policyreports.yaml pins %s", got, reportsRef)
	}

	// At the oldest release the chart supports: Helm's client-only default,
	// v1.20, is below the chart's kubeVersion.
	kv, err := chartutil.ParseKubeVersion(kubeversion.Minimum)
	if err != nil {
		t.Fatal(err)
	}
	if bad := render.LintPackage(pkg, kv); len(bad) > 0 {
		t.Errorf("helm lint %s:\n%s", filepath.Base(pkg), strings.Join(bad, "\n"))
	}
	ch, err := loader.Load(pkg)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Template(ch, nil, kv)
	if err != nil {
		t.Fatal(err)
	}
	rendered := render.Images(objs)
	if !slices.Equal(rendered, []string{ref}) {
		t.Errorf("helm template %s runs images %v, want [%s] (install.yaml's)", filepath.Base(pkg), rendered, ref)
	}
	objs, err = render.Template(ch, map[string]any{"policyReports": map[string]any{"enabled": true}}, kv)
	if err != nil {
		t.Fatal(err)
	}
	if rendered, want := render.Images(objs), []string{ref, reportsRef}; !slices.Equal(rendered, want) {
		t.Errorf("helm template %s --set policyReports.enabled=true runs images %v, want %v", filepath.Base(pkg), rendered, want)
	}
}

// TestCosignVerifiesASignedRelease signs a release as make release does with
// COSIGN_KEY (make release-sign: SHA256SUMS, which names every other file,
// into a Sigstore bundle) and verifies it as docs/install.md tells an admin
// to: cosign verify-blob with the public key, then sha256sum -c. cosign
// (make cosign) must refuse a SHA256SUMS that differs by one byte.
func TestCosignVerifiesASignedRelease(t *testing.T) {
	dist := release(t)
	cosign := binTool(t, "cosign")
	env := append(os.Environ(), "COSIGN_PASSWORD=")
	run := func(dir, name string, args ...string) error {
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
		}
		return nil
	}
	keys, signed := t.TempDir(), t.TempDir()
	if err := run(keys, cosign, "generate-key-pair"); err != nil {
		t.Fatal(err)
	}
	// A copy is signed: the shared release stays as the other tests read it.
	sums := readFile(t, dist, "SHA256SUMS")
	if err := os.WriteFile(filepath.Join(signed, "SHA256SUMS"), sums, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run("../..", "make", "-s", "release-sign", "DIST="+signed, "COSIGN_KEY="+filepath.Join(keys, "cosign.key")); err != nil {
		t.Fatal(err)
	}
	verify := func(file string) error {
		return run(signed, cosign, "verify-blob", "--key", filepath.Join(keys, "cosign.pub"),
			"--bundle", SignatureFile, "--insecure-ignore-tlog=true", file)
	}
	if err := verify("SHA256SUMS"); err != nil {
		t.Errorf("the signed release does not verify: %v", err)
	}
	if err := run(dist, "sha256sum", "-c", "--quiet", filepath.Join(signed, "SHA256SUMS")); err != nil {
		t.Errorf("the signed SHA256SUMS does not match the release's files: %v", err)
	}
	tampered := bytes.Replace(sums, []byte("  install.yaml"), []byte("  install.yam1"), 1)
	if bytes.Equal(tampered, sums) {
		t.Fatal("SHA256SUMS names no install.yaml to tamper with")
	}
	if err := os.WriteFile(filepath.Join(signed, "tampered"), tampered, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := verify("tampered"); err == nil {
		t.Error("cosign verified a SHA256SUMS that differs from the one signed")
	}
}

// TestKrewInstallsThePluginFromTheRelease installs kubectl fence as an admin
// would, with krew (built from its module into bin/ by make krew), from a
// krew index: a local git repository holding the release's manifest as
// plugins/fence.yaml, its archive URLs pointed at a local server of the
// release's files. krew checks the manifest and each archive's SHA-256, and
// the installed plugin must report the release's version. Every archive
// must hold an executable for its own platform and the LICENSE.
func TestKrewInstallsThePluginFromTheRelease(t *testing.T) {
	dist := release(t)
	krew := binTool(t, "krew")
	here := runtime.GOOS + "/" + runtime.GOARCH
	if !slices.Contains(PluginPlatforms, here) {
		t.Fatalf("this machine's platform %s is none the plugin is released for (%v)", here, PluginPlatforms)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(dist)))
	defer srv.Close()
	index := t.TempDir()
	manifest := strings.ReplaceAll(string(readFile(t, dist, PluginManifest)), DefaultDownloadURL+testVersion+"/", srv.URL+"/")
	if err := os.MkdirAll(filepath.Join(index, "plugins"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(index, "plugins", "fence.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	root, home := t.TempDir(), t.TempDir()
	env := append(os.Environ(), "KREW_ROOT="+root, "HOME="+home, "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
	for _, args := range [][]string{
		{"git", "-C", index, "init", "-q"}, {"git", "-C", index, "add", "."}, {"git", "-C", index, "commit", "-qm", "index"},
		{krew, "index", "add", "local", index}, {krew, "install", "local/fence"},
	} {
		cmd := exec.CommandContext(t.Context(), args[0], args[1:]...)
		cmd.Env, cmd.Stdin = env, strings.NewReader("")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	out, err := exec.CommandContext(t.Context(), filepath.Join(root, "bin", "kubectl-fence"), "version", "--client", "-o", "json").Output()
	if err != nil {
		t.Fatalf("the installed kubectl-fence version: %v", err)
	}
	var v struct {
		Client struct{ Version, Platform string }
	}
	if err := json.Unmarshal(out, &v); err != nil || v.Client.Version != testVersion || v.Client.Platform != here {
		t.Errorf("the installed plugin reports %s (%v), want version %s on %s", out, err, testVersion, here)
	}

	for _, p := range testPlatforms {
		files := map[string][]byte{}
		untar(t, filepath.Join(dist, PluginArchive(p)), func(h *tar.Header, body []byte) {
			files[h.Name] = body
			if h.Name == "kubectl-fence" && h.Mode&0o111 == 0 {
				t.Errorf("%s: kubectl-fence is not executable (mode %o)", PluginArchive(p), h.Mode)
			}
		})
		if got := slices.Sorted(maps.Keys(files)); !slices.Equal(got, []string{"LICENSE", "kubectl-fence"}) {
			t.Errorf("%s holds %v, want LICENSE and kubectl-fence", PluginArchive(p), got)
		}
		if got := executablePlatform(files["kubectl-fence"]); got != p {
			t.Errorf("%s: kubectl-fence is an executable for %q, want %s", PluginArchive(p), got, p)
		}
	}
}
