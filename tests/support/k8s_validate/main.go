// k8s_validate reads Kubernetes manifests (a `helm template` output: YAML documents separated
// by ---) on stdin and decodes each into Kubernetes' own API types with strict unmarshalling:
// an unknown or misspelt field, a wrong type or a duplicate key fails, as the API server's
// strict field validation would. Names, labels and port names are checked with apimachinery's
// validators. Prints "KIND NAME" per object; exits 1 with every problem on stderr.
// Used by tests/deploy/test_helm.py (built by tests/support/kubernetes.py).
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// newObject: the typed object for an apiVersion and kind, nil for one this chart must not emit.
func newObject(apiVersion, kind string) any {
	switch apiVersion + "/" + kind {
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}
	case "v1/Service":
		return &corev1.Service{}
	case "v1/Secret":
		return &corev1.Secret{}
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}
	case "monitoring.coreos.com/v1/PodMonitor":
		return &monitoringv1.PodMonitor{}
	}
	return nil
}

var separator = regexp.MustCompile(`(?m)^---\s*$`)

func checkMeta(meta metav1.ObjectMeta, path *field.Path) field.ErrorList {
	errs := field.ErrorList{}
	for _, msg := range validation.IsDNS1123Subdomain(meta.Name) {
		errs = append(errs, field.Invalid(path.Child("name"), meta.Name, msg))
	}
	errs = append(errs, metav1validation.ValidateLabels(meta.Labels, path.Child("labels"))...)
	return errs
}

func checkPorts(names []string, path *field.Path) field.ErrorList {
	errs := field.ErrorList{}
	seen := map[string]bool{}
	for i, name := range names {
		for _, msg := range validation.IsValidPortName(name) {
			errs = append(errs, field.Invalid(path.Index(i).Child("name"), name, msg))
		}
		if seen[name] {
			errs = append(errs, field.Duplicate(path.Index(i).Child("name"), name))
		}
		seen[name] = true
	}
	return errs
}

func check(object any) field.ErrorList {
	switch o := object.(type) {
	case *corev1.Service:
		names := []string{}
		for _, p := range o.Spec.Ports {
			names = append(names, p.Name)
		}
		return append(checkMeta(o.ObjectMeta, field.NewPath("metadata")),
			checkPorts(names, field.NewPath("spec", "ports"))...)
	case *appsv1.Deployment:
		errs := checkMeta(o.ObjectMeta, field.NewPath("metadata"))
		selector, err := metav1.LabelSelectorAsSelector(o.Spec.Selector)
		if err != nil {
			errs = append(errs, field.Invalid(field.NewPath("spec", "selector"), o.Spec.Selector, err.Error()))
		} else if !selector.Matches(labels.Set(o.Spec.Template.Labels)) {
			errs = append(errs, field.Invalid(field.NewPath("spec", "template", "metadata", "labels"),
				o.Spec.Template.Labels, "does not match spec.selector"))
		}
		for i, c := range o.Spec.Template.Spec.Containers {
			names := []string{}
			for _, p := range c.Ports {
				names = append(names, p.Name)
			}
			errs = append(errs, checkPorts(names, field.NewPath("spec", "template", "spec", "containers").Index(i).Child("ports"))...)
		}
		return errs
	case *corev1.ConfigMap:
		return checkMeta(o.ObjectMeta, field.NewPath("metadata"))
	case *policyv1.PodDisruptionBudget:
		return checkMeta(o.ObjectMeta, field.NewPath("metadata"))
	case *monitoringv1.ServiceMonitor:
		return checkMeta(o.ObjectMeta, field.NewPath("metadata"))
	case *monitoringv1.PodMonitor:
		return checkMeta(o.ObjectMeta, field.NewPath("metadata"))
	}
	return nil
}

func main() {
	input, err := io.ReadAll(bufio.NewReader(os.Stdin))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	failed := false
	count := 0
	for _, doc := range separator.Split(string(input), -1) {
		if len(bytes.TrimSpace([]byte(stripComments(doc)))) == 0 {
			continue
		}
		var header metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &header); err != nil {
			fmt.Fprintf(os.Stderr, "not YAML: %v\n", err)
			failed = true
			continue
		}
		object := newObject(header.APIVersion, header.Kind)
		if object == nil {
			fmt.Fprintf(os.Stderr, "unexpected kind %s %s\n", header.APIVersion, header.Kind)
			failed = true
			continue
		}
		if err := yaml.UnmarshalStrict([]byte(doc), object); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", header.Kind, err)
			failed = true
			continue
		}
		meta := object.(metav1.Object)
		for _, e := range check(object) {
			fmt.Fprintf(os.Stderr, "%s %s: %v\n", header.Kind, meta.GetName(), e)
			failed = true
		}
		fmt.Printf("%s %s\n", header.Kind, meta.GetName())
		count++
	}
	if count == 0 {
		fmt.Fprintln(os.Stderr, "no objects")
		failed = true
	}
	if failed {
		os.Exit(1)
	}
}

var comment = regexp.MustCompile(`(?m)^\s*#.*$`)

func stripComments(doc string) string { return comment.ReplaceAllString(doc, "") }
