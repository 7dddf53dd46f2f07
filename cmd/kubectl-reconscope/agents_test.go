package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestAgentPodsSecure: an agent pod is taken as run with --metrics-secure as the agent reads
// its command line and environment: the flag (with or without a value) wins over
// RECONSCOPE_METRICS_SECURE, which counts where the flag is not given.
func TestAgentPodsSecure(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  string // RECONSCOPE_METRICS_SECURE, "" unset
		want bool
	}{
		{"neither", []string{"run"}, "", false},
		{"the flag", []string{"run", "--metrics-secure"}, "", true},
		{"the flag with a value", []string{"run", "--metrics-secure=true"}, "", true},
		{"the flag false", []string{"run", "--metrics-secure=false"}, "", false},
		{"the environment", []string{"run"}, "true", true},
		{"the flag false wins over the environment", []string{"run", "--metrics-secure=false"}, "true", false},
		{"the flag wins over the environment false", []string{"run", "--metrics-secure"}, "false", true},
		{"a single dash is not the flag (the agent refuses it)", []string{"run", "-metrics-secure"}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := corev1.Container{Name: "agent", Args: tt.args}
			if tt.env != "" {
				c.Env = []corev1.EnvVar{{Name: "RECONSCOPE_METRICS_SECURE", Value: tt.env}}
			}
			pod := corev1.Pod{Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{c}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
			pod.Name = "agent-1"
			got := agentPods([]corev1.Pod{pod}, 0)
			if len(got) != 1 || got[0].secure != tt.want {
				t.Errorf("args %v, environment %q: %+v, want secure %v", tt.args, tt.env, got, tt.want)
			}
		})
	}
}
