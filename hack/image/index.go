package main

import (
	"archive/tar"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// sourceDateEpoch is the time of the release's commit when the caller says
// so (SOURCE_DATE_EPOCH, reproducible-builds.org), else the fixed epoch: the
// images' creation time and every tar entry's mtime.
func sourceDateEpoch() (time.Time, error) {
	v := os.Getenv("SOURCE_DATE_EPOCH")
	if v == "" {
		return epoch, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since 1970: %w", v, err)
	}
	return time.Unix(n, 0).UTC(), nil
}

// runIndex builds the binary for each platform, one image each, and writes
// them under one OCI image index into an OCI image-layout tarball.
func runIndex(ctx context.Context, out, platforms, pkg, binDir, digestFile, version, title string, sp spec) error {
	if version == "" {
		version = gitOr(ctx, "dev", "describe", "--always", "--dirty")
	}
	when, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	epoch = when
	sp.Labels = map[string]string{
		"org.opencontainers.image.source":   source,
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": gitOr(ctx, "", "rev-parse", "HEAD"),
		"org.opencontainers.image.title":    title,
	}
	tmp, err := os.MkdirTemp("", "webhook-index-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if binDir == "" {
		binDir = tmp
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range strings.Split(platforms, ",") {
		arch, ok := strings.CutPrefix(strings.TrimSpace(p), "linux/")
		if !ok || arch == "" {
			return fmt.Errorf("-platforms %q: each entry must be linux/<GOARCH>", platforms)
		}
		bin := filepath.Join(binDir, filepath.Base(sp.Entrypoint)+"-linux-"+arch)
		if err := buildBinary(ctx, pkg, arch, sp.LDFlags, bin); err != nil {
			return err
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			return err
		}
		asp := sp
		asp.Arch = arch
		img, err := newImage(b, asp)
		if err != nil {
			return err
		}
		img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}},
		})
	}
	dir := filepath.Join(tmp, "layout")
	if _, err := layout.Write(dir, idx); err != nil {
		return fmt.Errorf("writing the OCI layout: %w", err)
	}
	if err := tarDir(dir, out, when); err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	if digestFile != "" {
		if err := os.WriteFile(digestFile, []byte(digest.String()+"\n"), 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("wrote %s: OCI index %s (%s) %s\n", out, digest, platforms, version)
	return nil
}

// tarDir writes dir as a tarball with entries in name order, owned by root,
// modes 0644/0755 and one mtime, so equal contents give equal bytes.
func tarDir(dir, out string, mtime time.Time) error {
	var paths []string
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		paths = append(paths, p)
		return nil
	}); err != nil {
		return err
	}
	sort.Strings(paths)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, p := range paths {
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime, Format: tar.FormatPAX, Mode: 0o644, Typeflag: tar.TypeReg}
		var content []byte
		if fi.IsDir() {
			h.Name, h.Mode, h.Typeflag = h.Name+"/", 0o755, tar.TypeDir
		} else if content, err = os.ReadFile(p); err != nil {
			return err
		}
		h.Size = int64(len(content))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(content); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
