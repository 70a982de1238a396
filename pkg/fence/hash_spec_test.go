package fence

import "testing"

// The contract's two hash vectors, computed by Node 20 on the host's algorithm.
func TestPodTemplateHashSpecVectors(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"a workspace template", `{"metadata":{"labels":{"sandbox.namzu.ai/template":"namzu-workspace"}},"spec":{"containers":[{"image":"namzu/agent:1","name":"main","volumeDevices":[{"devicePath":"/dev/workspace","name":"workspace"}]}],"terminationGracePeriodSeconds":5}}`,
			"sha256:83ff99a5673c470fbc66985bf98cf2f31440e270490233b4dea493daa38a6e03"},
		{"array-index keys come first in numeric order", `{"spec":{"nodeSelector":{"9":"b","10":"a","a":"c"}}}`,
			"sha256:82a444e63998d49fe84f66cfff11f30bb4507540b445d30dca81df306912f5b9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PodTemplateHashJSON([]byte(tt.in))
			if err != nil || got != tt.want {
				t.Errorf("PodTemplateHashJSON = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
