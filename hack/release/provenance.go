package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	slsa "github.com/in-toto/attestation/go/predicates/provenance/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// ProvenanceFile is the release's in-toto statement of SLSA provenance.
const ProvenanceFile = "provenance.intoto.json"

// The provenance's fixed identifiers: how a release is built (this
// command, whose inputs are the externalParameters) and who built it.
const (
	buildType = "https://github.com/sandbox-fence/sandbox-fence/tree/main/hack/release@v1"
	builderID = "https://github.com/sandbox-fence/sandbox-fence/tree/main/hack/release"
	sourceURI = "git+https://github.com/sandbox-fence/sandbox-fence"
)

// provenance is an in-toto Statement v1 whose subjects are every file in
// out, by SHA-256, and whose predicate is SLSA Provenance v1: the version
// and image asked for, the commit built, whether the tree had uncommitted
// changes, and the Go release. Built with in-toto's own Go types, which
// validate the statement as verifiers read it; written as indented JSON
// with no timestamp, so a rebuild writes the same bytes.
func provenance(ctx context.Context, root, out, version, image string, env []string) ([]byte, error) {
	commit, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return nil, fmt.Errorf("provenance names the commit built, and git rev-parse HEAD failed: %w", err)
	}
	status, err := exec.CommandContext(ctx, "git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output()
	if err != nil {
		return nil, fmt.Errorf("git status: %w", err)
	}
	goVersion, err := goEnv(ctx, env, "GOVERSION")
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		return nil, err
	}
	var subjects []*intoto.ResourceDescriptor
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(out, e.Name()))
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		subjects = append(subjects, &intoto.ResourceDescriptor{Name: e.Name(), Digest: map[string]string{"sha256": hex.EncodeToString(sum[:])}})
	}
	external, err := structpb.NewStruct(map[string]any{"version": version, "image": image, "source": sourceURI + "@refs/tags/" + version})
	if err != nil {
		return nil, err
	}
	internal, err := structpb.NewStruct(map[string]any{"goVersion": goVersion, "uncommittedChanges": len(bytes.TrimSpace(status)) > 0})
	if err != nil {
		return nil, err
	}
	pred := &slsa.Provenance{
		BuildDefinition: &slsa.BuildDefinition{
			BuildType: buildType, ExternalParameters: external, InternalParameters: internal,
			ResolvedDependencies: []*intoto.ResourceDescriptor{{
				Uri: sourceURI + "@refs/tags/" + version, Digest: map[string]string{"gitCommit": strings.TrimSpace(string(commit))},
			}},
		},
		RunDetails: &slsa.RunDetails{Builder: &slsa.Builder{Id: builderID}},
	}
	if err := pred.Validate(); err != nil {
		return nil, fmt.Errorf("SLSA provenance: %w", err)
	}
	predicate, err := toStruct(pred)
	if err != nil {
		return nil, err
	}
	st := &intoto.Statement{Type: intoto.StatementTypeUri, Subject: subjects, PredicateType: "https://slsa.dev/provenance/v1", Predicate: predicate}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("in-toto statement: %w", err)
	}
	b, err := protojson.Marshal(st)
	if err != nil {
		return nil, err
	}
	// protojson varies its whitespace on purpose; indent it one way.
	var indented bytes.Buffer
	if err := json.Indent(&indented, b, "", "  "); err != nil {
		return nil, err
	}
	return append(indented.Bytes(), '\n'), nil
}

// toStruct converts the predicate to the Statement's generic form.
func toStruct(p *slsa.Provenance) (*structpb.Struct, error) {
	b, err := protojson.Marshal(p)
	if err != nil {
		return nil, err
	}
	s := &structpb.Struct{}
	return s, protojson.Unmarshal(b, s)
}

// goEnv is one `go env` value, as the release's builds see it.
func goEnv(ctx context.Context, env []string, name string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "env", name)
	cmd.Env = env
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}
