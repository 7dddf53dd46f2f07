package deploy_test

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/reconscope/reconscope/test/testenv"
)

func kubectlBinary(t *testing.T) string {
	t.Helper()
	dir, err := testenv.ControlPlaneDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "kubectl")
}

func run(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

// objects splits a multi-document YAML stream into objects, keyed by kind/namespace/name.
func objects(t *testing.T, stream []byte) map[string]*unstructured.Unstructured {
	t.Helper()
	out := map[string]*unstructured.Unstructured{}
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stream), 4096)
	for {
		var u unstructured.Unstructured
		if err := d.Decode(&u.Object); err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatal(err)
		}
		if len(u.Object) == 0 {
			continue
		}
		out[u.GetKind()+"/"+u.GetNamespace()+"/"+u.GetName()] = &u
	}
	return out
}

// TestDefaultKustomizationOwnsOnlyItsNamespace: kubectl apply -k deploy/ creates one
// namespace, reconscope, and puts every namespaced object in it, so kubectl delete -k deploy/
// deletes nothing it did not create (issue 13: it used to delete the example collector's
// observability namespace). The example collector is a kustomization of its own.
func TestDefaultKustomizationOwnsOnlyItsNamespace(t *testing.T) {
	if testing.Short() {
		t.Skip("needs kubectl from the control-plane test bed; skipped with -short")
	}
	kubectl := kubectlBinary(t)
	for dir, ns := range map[string]string{".": agentNamespace, "otel-collector": "observability"} {
		objs := objects(t, run(t, kubectl, "kustomize", dir))
		var namespaces []string
		for _, u := range objs {
			if u.GetKind() == "Namespace" {
				namespaces = append(namespaces, u.GetName())
			} else if u.GetNamespace() != "" && u.GetNamespace() != ns {
				t.Errorf("kubectl kustomize %s: %s %s/%s is outside namespace %s", dir, u.GetKind(), u.GetNamespace(), u.GetName(), ns)
			}
		}
		if !slices.Equal(namespaces, []string{ns}) {
			t.Errorf("kubectl kustomize %s creates namespaces %v, want only %s", dir, namespaces, ns)
		}
	}
}
