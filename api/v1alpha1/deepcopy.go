package v1alpha1

import "k8s.io/apimachinery/pkg/runtime"

// Hand-written because the types are four small structs; a test checks that
// a deep copy shares no slice with the original.

// DeepCopyInto copies s into out.
func (s *FenceConfigSpec) DeepCopyInto(out *FenceConfigSpec) {
	*out = *s
	if s.Hosts != nil {
		out.Hosts = make([]Host, len(s.Hosts))
		for i := range s.Hosts {
			out.Hosts[i] = Host{Username: s.Hosts[i].Username, Namespaces: append([]string(nil), s.Hosts[i].Namespaces...)}
		}
	}
	out.BreakGlass.Users = append([]string(nil), s.BreakGlass.Users...)
	out.BreakGlass.Groups = append([]string(nil), s.BreakGlass.Groups...)
}

// DeepCopyInto copies c into out.
func (c *FenceConfig) DeepCopyInto(out *FenceConfig) {
	*out = *c
	out.TypeMeta = c.TypeMeta
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	c.Spec.DeepCopyInto(&out.Spec)
}

// DeepCopy returns a deep copy of c.
func (c *FenceConfig) DeepCopy() *FenceConfig {
	if c == nil {
		return nil
	}
	out := new(FenceConfig)
	c.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (c *FenceConfig) DeepCopyObject() runtime.Object { return c.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (l *FenceConfigList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := new(FenceConfigList)
	*out = *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]FenceConfig, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}
