package framework

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// WaitWebhookRolledOut waits until the webhook Deployment has every replica
// updated and available, what `kubectl rollout status` waits for. It stops
// early, with the reason, when a container keeps crashing or cannot start.
func WaitWebhookRolledOut(ctx context.Context, env *Env, timeout time.Duration) error {
	baseline := map[string]int32{}
	return Eventually(ctx, timeout, 250*time.Millisecond, "webhook Deployment rolled out", func(ctx context.Context) (bool, string, error) {
		d, err := env.Admin.Kube.AppsV1().Deployments(WebhookNamespace).Get(ctx, WebhookName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "", fmt.Errorf("Deployment %s/%s is not in the deployed bundle", WebhookNamespace, WebhookName)
		}
		if err != nil {
			return false, err.Error(), nil
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		s := d.Status
		done := s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want &&
			s.Replicas == want && s.AvailableReplicas == want
		for _, c := range s.Conditions {
			if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
				return false, "", fmt.Errorf("rollout stuck: %s", c.Message)
			}
		}
		if !done {
			if why := crashLooping(ctx, env, baseline); why != "" {
				return false, "", fmt.Errorf("the rollout cannot finish: %s", why)
			}
		}
		return done, fmt.Sprintf("replicas %d updated %d available %d of %d", s.Replicas, s.UpdatedReplicas, s.AvailableReplicas, want), nil
	})
}

// crashLooping names a webhook container that keeps failing, so a wait
// stops for a rollout that cannot finish and shows why. Restarts count from
// the first look (baseline, filled on the way): a container that failed a
// few times while its node came back is not crash looping.
func crashLooping(ctx context.Context, env *Env, baseline map[string]int32) string {
	pods, err := env.Admin.Kube.CoreV1().Pods(WebhookNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	for _, pod := range pods.Items {
		for _, cs := range pod.Status.ContainerStatuses {
			key := pod.Name + "/" + cs.Name
			if _, seen := baseline[key]; !seen {
				baseline[key] = cs.RestartCount
			}
			if cs.RestartCount-baseline[key] >= 3 && !cs.Ready {
				return fmt.Sprintf("container %s of pod %s restarted %d times while waiting (%s)", cs.Name, pod.Name, cs.RestartCount-baseline[key], containerState(cs.LastTerminationState))
			}
			if w := cs.State.Waiting; w != nil && (w.Reason == "ErrImageNeverPull" || w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff" || w.Reason == "CreateContainerConfigError" || w.Reason == "CreateContainerError") {
				return fmt.Sprintf("container %s of pod %s: %s %s", cs.Name, pod.Name, w.Reason, w.Message)
			}
		}
	}
	return ""
}

// WebhookPodReport describes the webhook pods for a failure message: node,
// phase, container states and the namespace's last events, what `kubectl
// describe` would show.
func WebhookPodReport(ctx context.Context, env *Env) string {
	if env == nil || env.Admin == nil {
		return ""
	}
	kc := env.Admin.Kube
	var b strings.Builder
	pods, err := kc.CoreV1().Pods(WebhookNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "list webhook pods: " + err.Error()
	}
	for _, pod := range pods.Items {
		fmt.Fprintf(&b, "pod %s: %s on %q\n", pod.Name, pod.Status.Phase, pod.Spec.NodeName)
		for _, cs := range pod.Status.ContainerStatuses {
			fmt.Fprintf(&b, "  container %s ready=%v restarts=%d state=%s last=%s\n", cs.Name, cs.Ready, cs.RestartCount, containerState(cs.State), containerState(cs.LastTerminationState))
		}
	}
	if evs, err := kc.CoreV1().Events(WebhookNamespace).List(ctx, metav1.ListOptions{}); err == nil {
		items := evs.Items
		if len(items) > 15 {
			items = items[len(items)-15:]
		}
		for _, e := range items {
			fmt.Fprintf(&b, "event %s %s/%s: %s\n", e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message)
		}
	}
	return b.String()
}

func containerState(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Waiting != nil:
		return "waiting " + s.Waiting.Reason + " " + s.Waiting.Message
	case s.Terminated != nil:
		return fmt.Sprintf("terminated %s exit %d %s", s.Terminated.Reason, s.Terminated.ExitCode, s.Terminated.Message)
	}
	return "unknown"
}

// WebhookEndpoint is one ready address of the webhook Service: somewhere the
// API server's admission calls can go.
type WebhookEndpoint struct {
	Address string
	Node    string // empty when the EndpointSlice does not say
}

// ReadyWebhookEndpoints lists the ready endpoints of the webhook Service,
// read from its EndpointSlices (what kube-proxy routes the Service to).
func ReadyWebhookEndpoints(ctx context.Context, kc kubernetes.Interface) ([]WebhookEndpoint, error) {
	list, err := kc.DiscoveryV1().EndpointSlices(WebhookNamespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + WebhookName})
	if err != nil {
		return nil, fmt.Errorf("list the EndpointSlices of Service %s/%s: %w", WebhookNamespace, WebhookName, err)
	}
	var ready []WebhookEndpoint
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || !*e.Conditions.Ready {
				continue
			}
			node := ""
			if e.NodeName != nil {
				node = *e.NodeName
			}
			for _, a := range e.Addresses {
				ready = append(ready, WebhookEndpoint{Address: a, Node: node})
			}
		}
	}
	return ready, nil
}
