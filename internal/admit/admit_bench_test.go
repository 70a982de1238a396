package admit_test

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/admit"
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
)

// BenchmarkValidateCiliumOwner is the rule's own cost per request, with the
// owner lookup answered from memory (the informer cache's role): admitted
// (the host's normal path), denied (invented owner) and with the optional
// uniqueness scan over 32 owners in the namespace.
func BenchmarkValidateCiliumOwner(b *testing.B) {
	claim := tst.MakeClaim("a").Obj()
	cnp := tst.MakeCNP(claim).Obj()
	others := []*unstructured.Unstructured{claim}
	for i := range 31 {
		others = append(others, tst.MakeClaim("other-"+string(rune('a'+i%26))+string(rune('a'+i/26))).Obj())
	}
	cases := []struct {
		name     string
		cfg      *fencev1alpha1.FenceConfig
		owners   admit.OwnerLookup
		wantErrs int
	}{
		{"admitted, owner found", tst.MakeConfig(fencev1alpha1.DefaultConfigName).Obj(), tst.NewFakeOwners(claim), 0},
		{"denied, owner missing", tst.MakeConfig(fencev1alpha1.DefaultConfigName).Obj(), tst.NewFakeOwners(), 1},
		{"admitted, unique label scan over 32 owners", tst.MakeConfig(fencev1alpha1.DefaultConfigName).UniqueOwnerLabel().Obj(), tst.NewFakeOwners(others...), 0},
	}
	ctx := context.Background()
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				errs, _ := admit.ValidateCiliumOwner(ctx, &c.cfg.Spec, c.owners, nil, cnp)
				if len(errs) != c.wantErrs {
					b.Fatalf("got %d errors, want %d: %v", len(errs), c.wantErrs, errs)
				}
			}
		})
	}
}
