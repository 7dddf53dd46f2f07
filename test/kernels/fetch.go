package main

// Step 1: the kernel package and busybox-static, fetched with apt-get download, unpacked with
// dpkg-deb and cached by version.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// newestPackage names the newest cloud kernel package of k's series, and its version.
func newestPackage(k kernel) (string, string, error) {
	re := k.pkgPattern()
	find := func() []string {
		out, _ := run("apt-cache", "pkgnames", "linux-image-"+k.Series)
		var m []string
		for _, n := range strings.Fields(string(out)) {
			if re.MatchString(n) {
				m = append(m, n)
			}
		}
		return m
	}
	names := find()
	if len(names) == 0 {
		if _, err := run("apt-get", "update", "-qq"); err != nil {
			return "", "", err
		}
		if names = find(); len(names) == 0 {
			return "", "", fmt.Errorf("no package matches %s (apt-cache pkgnames)", re)
		}
	}
	sort.Slice(names, func(i, j int) bool { return versionLess(names[i], names[j]) })
	name := names[len(names)-1]
	ver, err := pkgVersion(name + ":" + k.Arch)
	return name, ver, err
}

// versionLess orders package names by the numbers in them (6.1.0-47 before 6.1.0-57).
func versionLess(a, b string) bool {
	na, nb := digits.FindAllString(a, -1), digits.FindAllString(b, -1)
	for i := 0; i < len(na) && i < len(nb); i++ {
		x, _ := strconv.Atoi(na[i])
		y, _ := strconv.Atoi(nb[i])
		if x != y {
			return x < y
		}
	}
	return len(na) < len(nb)
}

var digits = regexp.MustCompile(`[0-9]+`)

func pkgVersion(pkg string) (string, error) {
	out, err := run("apt-cache", "show", "--no-all-versions", pkg)
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "Version: "); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("apt-cache show %s: no version", pkg)
}

// fetchDeb downloads pkg:arch at version ver and unpacks it into a fresh folder of dir.
func fetchDeb(dir, pkg, ver, arch string) (string, error) {
	tmp, err := os.MkdirTemp(dir, "download-")
	if err != nil {
		return "", err
	}
	cmd := exec.Command("apt-get", "download", "-qq", pkg+":"+arch+"="+ver)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("apt-get download %s: %v: %s", pkg, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != 1 {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("apt-get download %s: %d packages", pkg, len(debs))
	}
	if _, err := run("dpkg-deb", "-x", debs[0], filepath.Join(tmp, "root")); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	return tmp, nil
}

// fetchKernel returns the cached vmlinuz of pkg at version ver, fetching it the first time.
func fetchKernel(cache, pkg, ver, arch string) (string, error) {
	dir := filepath.Join(cache, pkg+"_"+ver)
	vmlinuz := filepath.Join(dir, "vmlinuz")
	if _, err := os.Stat(vmlinuz); err == nil {
		fmt.Printf("kernel %s %s (cached)\n", pkg, ver)
		return vmlinuz, nil
	}
	t := time.Now()
	tmp, err := fetchDeb(cache, pkg, ver, arch)
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	got, _ := filepath.Glob(filepath.Join(tmp, "root/boot/vmlinuz-*"))
	cfg, _ := filepath.Glob(filepath.Join(tmp, "root/boot/config-*"))
	if len(got) != 1 || len(cfg) != 1 {
		return "", fmt.Errorf("%s: no single boot/vmlinuz-* and config-*", pkg)
	}
	part := dir + ".part"
	os.RemoveAll(part)
	if err := os.MkdirAll(part, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(got[0], filepath.Join(part, "vmlinuz")); err != nil {
		return "", err
	}
	if err := os.Rename(cfg[0], filepath.Join(part, "config")); err != nil {
		return "", err
	}
	if err := os.Rename(part, dir); err != nil {
		return "", err
	}
	fmt.Printf("kernel %s %s fetched in %s\n", pkg, ver, time.Since(t).Round(100*time.Millisecond))
	return vmlinuz, nil
}

// fetchBusybox returns the cached static busybox for arch.
func fetchBusybox(cache, arch string) (string, error) {
	ver, err := pkgVersion("busybox-static:" + arch)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "busybox-static_"+strings.ReplaceAll(ver, ":", "_")+"_"+arch)
	bin := filepath.Join(dir, "busybox")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	tmp, err := fetchDeb(cache, "busybox-static", ver, arch)
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(filepath.Join(tmp, "root/bin/busybox"), bin); err != nil {
		return "", err
	}
	return bin, nil
}
