package admit_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"

	fencev1alpha1 "github.com/sandbox-fence/sandbox-fence/api/v1alpha1"
	"github.com/sandbox-fence/sandbox-fence/internal/admit"
	tst "github.com/sandbox-fence/sandbox-fence/internal/testing"
)

func TestValidateSandboxDelete(t *testing.T) {
	strict := tst.MakeConfig("sandbox-fence").StrictDelete().Obj()
	rv := "1001"
	empty := ""
	fenced := &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}}
	path := field.NewPath("preconditions", "resourceVersion")
	const tail = "; with spec.strictDelete set, deleting a fenced Sandbox must be a fenced DELETE carrying preconditions.resourceVersion of the read that checked the epoch (contract §3.4)"

	cases := []struct {
		name string
		cfg  *fencev1alpha1.FenceConfig
		old  *unstructured.Unstructured
		opts *metav1.DeleteOptions
		want field.ErrorList
	}{{
		name: "an unconditional delete of a fenced Sandbox is admitted while strict delete is off",
		cfg:  tst.MakeConfig("sandbox-fence").Obj(),
		old:  tst.MakeSandbox("s").Epoch("7").Obj(),
	}, {
		name: "the fenced delete of a fenced Sandbox is admitted",
		cfg:  strict,
		old:  tst.MakeSandbox("s").Epoch("7").Obj(),
		opts: fenced,
	}, {
		name: "an unconditional delete of a Sandbox never fenced is admitted",
		cfg:  strict,
		old:  tst.MakeSandbox("s").Obj(),
	}, {
		name: "an unconditional delete of a Sandbox at epoch 0 is admitted",
		cfg:  strict,
		old:  tst.MakeSandbox("s").Epoch("0").Obj(),
		opts: &metav1.DeleteOptions{},
	}, {
		name: "an unconditional delete of a Sandbox above epoch 0 is refused",
		cfg:  strict,
		old:  tst.MakeSandbox("s").Epoch("7").Obj(),
		want: field.ErrorList{field.Required(path, "the stored holder epoch is 7"+tail)},
	}, {
		name: "preconditions with only a uid do not fence the delete",
		cfg:  strict,
		old:  tst.MakeSandbox("s").Epoch("9007199254740991").Obj(),
		opts: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{}},
		want: field.ErrorList{field.Required(path, "the stored holder epoch is 9007199254740991"+tail)},
	}, {
		name: "an empty precondition resourceVersion does not fence the delete",
		cfg:  strict,
		old:  tst.MakeSandbox("s").Epoch("2").Obj(),
		opts: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &empty}},
		want: field.ErrorList{field.Required(path, "the stored holder epoch is 2"+tail)},
	}, {
		name: "a malformed stored epoch is never read as 0",
		cfg:  strict,
		old:  tst.MakeSandbox("s").Epoch("007").Obj(),
		want: field.ErrorList{field.Required(path, "the stored holder epoch \"007\" is malformed"+tail)},
	}, {
		name: "an epoch past the JavaScript safe integer is malformed",
		cfg:  strict,
		old:  tst.MakeSandbox("s").Epoch("9007199254740992").Obj(),
		want: field.ErrorList{field.Required(path, "the stored holder epoch \"9007199254740992\" is malformed"+tail)},
	}, {
		name: "a Sandbox that could not be read fails closed",
		cfg:  strict,
		want: field.ErrorList{field.Required(path, "the stored Sandbox could not be read"+tail)},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := admit.ValidateSandboxDelete(&tc.cfg.Spec, tc.old, tc.opts)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestReadEpoch(t *testing.T) {
	type result struct {
		State admit.EpochState
		N     uint64
	}
	cases := []struct {
		name        string
		annotations map[string]string
		want        result
	}{
		{name: "no annotations map reads as absent", want: result{admit.EpochAbsent, 0}},
		{name: "other annotations only read as absent", annotations: map[string]string{"x": "1"}, want: result{admit.EpochAbsent, 0}},
		{name: "zero is well formed", annotations: map[string]string{admit.EpochAnnotation: "0"}, want: result{admit.EpochWell, 0}},
		{name: "the largest safe integer is well formed", annotations: map[string]string{admit.EpochAnnotation: "9007199254740991"}, want: result{admit.EpochWell, 9007199254740991}},
		{name: "one past the safe integer is malformed", annotations: map[string]string{admit.EpochAnnotation: "9007199254740992"}, want: result{admit.EpochMalformed, 0}},
		{name: "seventeen digits are malformed", annotations: map[string]string{admit.EpochAnnotation: "10000000000000000"}, want: result{admit.EpochMalformed, 0}},
		{name: "the empty string is malformed", annotations: map[string]string{admit.EpochAnnotation: ""}, want: result{admit.EpochMalformed, 0}},
		{name: "a leading zero is malformed", annotations: map[string]string{admit.EpochAnnotation: "01"}, want: result{admit.EpochMalformed, 0}},
		{name: "a plus sign is malformed", annotations: map[string]string{admit.EpochAnnotation: "+1"}, want: result{admit.EpochMalformed, 0}},
		{name: "an exponent is malformed", annotations: map[string]string{admit.EpochAnnotation: "1e3"}, want: result{admit.EpochMalformed, 0}},
		{name: "whitespace is malformed", annotations: map[string]string{admit.EpochAnnotation: " 1"}, want: result{admit.EpochMalformed, 0}},
		{name: "non-ASCII digits are malformed", annotations: map[string]string{admit.EpochAnnotation: "١"}, want: result{admit.EpochMalformed, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, n := admit.ReadEpoch(tc.annotations)
			if diff := cmp.Diff(tc.want, result{s, n}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
