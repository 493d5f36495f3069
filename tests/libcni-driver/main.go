// libcni-driver: a real CNI client for the integration tests.
//
// It drives a plugin with github.com/containernetworking/cni/libcni the way
// containerd, CRI-O and Multus do (AddNetwork/CheckNetwork/DelNetwork for a
// .conf, the *NetworkList variants for a .conflist, libcni's own result cache).
//
// It is built against Debian's golang-github-appc-cni-dev, which is libcni
// 1.1.2. That version knows results up to spec 1.0.0 only (types/100 has
// ImplementedSpecVersion "1.0.0") and has no STATUS or GC. So:
//
//   - cniVersion 0.1.0 .. 1.0.0 with add/check/del: the real libcni API.
//   - cniVersion 1.1.0 (any version libcni does not know) and every
//     status/gc: the same library's lower layer, pkg/invoke (invoke.Args and
//     the RawExec semantics, so the same environment), with the config built
//     the way libcni's buildOneConfig / GCNetworkList / GetStatusNetworkList
//     (libcni >= 1.2) build it: `name` and `cniVersion` injected from the
//     list, `prevResult` from the previous plugin or from the cache,
//     `runtimeConfig` filtered through the plugin's `capabilities`, and for GC
//     `cni.dev/valid-attachments` (plus the legacy `cni.dev/attachments`
//     that libcni also injects, cni#1101). STATUS and GC get only CNI_COMMAND
//     and CNI_PATH set (the other CNI_* variables empty), as libcni does.
//     The result is printed as the plugin's raw JSON. The result cache uses
//     libcni's on-disk format (cacheDir/results/NET-CID-IF, kind cniCacheV1).
//     Deliberately NOT done for gc: libcni >= 1.2 first issues a DEL for every
//     cached attachment missing from the valid list; this driver skips that
//     pass so that the plugin's own GC is what the tests exercise.
//
// Usage:
//
//	driver -cmd add|del|check|status|gc -conf FILE(.conf|.conflist)
//	       -netns PATH -cid ID -ifname IF -path DIR1:DIR2
//	       [-cap deviceID=VALUE]... [-args K=V;K=V]
//	       [-valid cid/ifname,cid/ifname] [-gc-keys both|spec|legacy]
//	       [-cache DIR] [-trace FILE]
//
// On success it prints the result JSON (add) on stdout and exits 0. On error
// it prints {"code":N,"msg":..,"details":..,"error":"<full error text>"} on
// stdout and exits 1; code is 0 when the error did not come from a plugin.
// -trace FILE appends one JSON line per plugin exec (command, stdin, stdout,
// stderr, exit error) so tests can look at the plugin's raw output.
//
// Shim mode: when invoked under another name than libcni-driver* (a symlink
// named `static`, `host-local`, `loopback`, `tuning`, ...), it acts as a
// version shim in front of Debian's plugin of the same name in
// $LIBCNI_SHIM_REAL_DIR (default /usr/lib/cni). Debian ships
// containernetworking-plugins 1.1.1, whose plugins stop at spec 1.0.0. For a 1.1.0 config the shim hands them the config as 1.0.0
// and relabels the (shape-compatible) result as 1.1.0; STATUS and GC succeed
// without doing anything, which is what upstream static/host-local/loopback/
// tuning do (their skel has no Status/GC callbacks). Test-only; the tests
// use it only for 1.1.0 configs. Any other version passes straight through.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/ioutil"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"
	"github.com/containernetworking/cni/pkg/version"
)

type capFlags map[string]interface{}

func (c capFlags) String() string { return fmt.Sprint(map[string]interface{}(c)) }

// Set takes KEY=VALUE; VALUE is parsed as JSON when it is valid JSON
// (e.g. -cap 'ips=["10.0.0.2/24"]'), otherwise taken as a string.
func (c capFlags) Set(s string) error {
	i := strings.Index(s, "=")
	if i <= 0 {
		return fmt.Errorf("-cap wants KEY=VALUE, got %q", s)
	}
	k, v := s[:i], s[i+1:]
	var j interface{}
	if err := json.Unmarshal([]byte(v), &j); err == nil {
		c[k] = j
	} else {
		c[k] = v
	}
	return nil
}

// traceExec is libcni's invoke.RawExec behaviour (same env, same stdin, same
// "text file busy" retry, same error decoding) plus an optional trace file
// and forwarding of the plugin's stderr on failure too (RawExec drops it).
type traceExec struct {
	version.PluginDecoder
	trace string
}

type traceRecord struct {
	Plugin  string          `json:"plugin"`
	Command string          `json:"command"`
	Stdin   json.RawMessage `json:"stdin"`
	Stdout  string          `json:"stdout"`
	Stderr  string          `json:"stderr"`
	ExitErr string          `json:"exitErr,omitempty"`
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return kv[len(key)+1:]
		}
	}
	return ""
}

func (e *traceExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	stdout := &bytes.Buffer{}
	stderr := &bytes.Buffer{}
	var runErr error
	for i := 0; i <= 5; i++ {
		stdout.Reset()
		stderr.Reset()
		c := exec.CommandContext(ctx, pluginPath)
		c.Env = environ
		c.Stdin = bytes.NewBuffer(stdinData)
		c.Stdout = stdout
		c.Stderr = stderr
		runErr = c.Run()
		if runErr != nil && strings.Contains(runErr.Error(), "text file busy") {
			time.Sleep(time.Second)
			continue
		}
		break
	}
	if e.trace != "" {
		rec := traceRecord{
			Plugin:  pluginPath,
			Command: envValue(environ, "CNI_COMMAND"),
			Stdin:   json.RawMessage(stdinData),
			Stdout:  stdout.String(),
			Stderr:  stderr.String(),
		}
		if !json.Valid(stdinData) {
			rec.Stdin, _ = json.Marshal(string(stdinData))
		}
		if runErr != nil {
			rec.ExitErr = runErr.Error()
		}
		if line, err := json.Marshal(rec); err == nil {
			if f, err := os.OpenFile(e.trace, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
				_, _ = f.Write(append(line, '\n'))
				_ = f.Close()
			}
		}
	}
	if stderr.Len() > 0 {
		fmt.Fprintf(os.Stderr, "[%s %s stderr]\n%s", filepath.Base(pluginPath), envValue(environ, "CNI_COMMAND"), stderr.String())
	}
	if runErr != nil {
		return nil, pluginErr(runErr, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// pluginErr is invoke.RawExec.pluginErr (unexported there), verbatim.
func pluginErr(err error, stdout, stderr []byte) error {
	emsg := types.Error{}
	if len(stdout) == 0 {
		if len(stderr) == 0 {
			emsg.Msg = fmt.Sprintf("netplugin failed with no error message: %v", err)
		} else {
			emsg.Msg = fmt.Sprintf("netplugin failed: %q", string(stderr))
		}
	} else if perr := json.Unmarshal(stdout, &emsg); perr != nil {
		emsg.Msg = fmt.Sprintf("netplugin failed but error parsing its diagnostic message %q: %v", string(stdout), perr)
	}
	return &emsg
}

func (e *traceExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

func fail(err error) {
	out := map[string]interface{}{"code": 0, "msg": err.Error(), "error": err.Error()}
	var te *types.Error
	if errors.As(err, &te) {
		out["code"] = te.Code
		out["msg"] = te.Msg
		if te.Details != "" {
			out["details"] = te.Details
		}
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	os.Exit(1)
}

func printJSON(v interface{}) {
	b, err := json.Marshal(v)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(b))
}

// libcniKnows: versions libcni 1.1.2 can parse results of.
func libcniKnows(v string) bool {
	for _, s := range version.All.SupportedVersions() {
		if s == v {
			return true
		}
	}
	return false
}

func main() {
	if base := filepath.Base(os.Args[0]); !strings.HasPrefix(base, "libcni-driver") {
		shimMain(base)
		return
	}

	cmd := flag.String("cmd", "", "add|del|check|status|gc")
	confPath := flag.String("conf", "", ".conf or .conflist file")
	netns := flag.String("netns", "", "CNI_NETNS")
	cid := flag.String("cid", "", "CNI_CONTAINERID")
	ifname := flag.String("ifname", "", "CNI_IFNAME")
	path := flag.String("path", "", "CNI_PATH (colon separated)")
	argsStr := flag.String("args", "", "CNI_ARGS K=V;K=V")
	valid := flag.String("valid", "", "gc: valid attachments cid/ifname,cid/ifname")
	cacheDir := flag.String("cache", "", "libcni cache dir (default libcni's /var/lib/cni)")
	trace := flag.String("trace", "", "append a JSON line per plugin exec to this file")
	gcKeys := flag.String("gc-keys", "both", "gc: which attachment keys to inject: both (libcni), spec (cni.dev/valid-attachments only), legacy (cni.dev/attachments only)")
	caps := capFlags{}
	flag.Var(caps, "cap", "capability arg KEY=VALUE (repeatable)")
	flag.Parse()

	var list *libcni.NetworkConfigList
	var single *libcni.NetworkConfig
	var err error
	if strings.HasSuffix(*confPath, ".conflist") {
		list, err = libcni.ConfListFromFile(*confPath)
	} else {
		single, err = libcni.ConfFromFile(*confPath)
		if err == nil {
			list, err = libcni.ConfListFromConf(single)
		}
	}
	if err != nil {
		fail(err)
	}

	var pluginArgs [][2]string
	if *argsStr != "" {
		for _, kv := range strings.Split(*argsStr, ";") {
			p := strings.SplitN(kv, "=", 2)
			if len(p) != 2 {
				fail(fmt.Errorf("-args: bad entry %q", kv))
			}
			pluginArgs = append(pluginArgs, [2]string{p[0], p[1]})
		}
	}
	var paths []string
	if *path != "" {
		paths = filepath.SplitList(*path)
	}
	rt := &libcni.RuntimeConf{
		ContainerID:    *cid,
		NetNS:          *netns,
		IfName:         *ifname,
		Args:           pluginArgs,
		CapabilityArgs: map[string]interface{}(caps),
	}
	ex := &traceExec{trace: *trace}
	cninet := libcni.NewCNIConfigWithCacheDir(paths, *cacheDir, ex)
	r := &raw{paths: paths, cacheDir: *cacheDir, exec: ex}
	if r.cacheDir == "" {
		r.cacheDir = libcni.CacheDir
	}
	ctx := context.Background()
	useLibcni := libcniKnows(list.CNIVersion)

	switch *cmd {
	case "add":
		if useLibcni {
			var res types.Result
			if single != nil {
				res, err = cninet.AddNetwork(ctx, single, rt)
			} else {
				res, err = cninet.AddNetworkList(ctx, list, rt)
			}
			if err != nil {
				fail(err)
			}
			printJSON(res)
			return
		}
		res, err := r.addList(ctx, list, rt)
		if err != nil {
			fail(err)
		}
		printJSON(res)
	case "check":
		if useLibcni {
			if single != nil {
				err = cninet.CheckNetwork(ctx, single, rt)
			} else {
				err = cninet.CheckNetworkList(ctx, list, rt)
			}
		} else {
			err = r.checkList(ctx, list, rt)
		}
		if err != nil {
			fail(err)
		}
	case "del":
		if useLibcni {
			if single != nil {
				err = cninet.DelNetwork(ctx, single, rt)
			} else {
				err = cninet.DelNetworkList(ctx, list, rt)
			}
		} else {
			err = r.delList(ctx, list, rt)
		}
		if err != nil {
			fail(err)
		}
	case "status":
		if err := r.statusList(ctx, list); err != nil {
			fail(err)
		}
	case "gc":
		attachments := []map[string]string{}
		if *valid != "" {
			for _, a := range strings.Split(*valid, ",") {
				p := strings.SplitN(a, "/", 2)
				if len(p) != 2 {
					fail(fmt.Errorf("-valid: bad entry %q (want cid/ifname)", a))
				}
				attachments = append(attachments, map[string]string{"containerID": p[0], "ifname": p[1]})
			}
		}
		if err := r.gcList(ctx, list, attachments, *gcKeys); err != nil {
			fail(err)
		}
	default:
		fail(fmt.Errorf("unknown -cmd %q", *cmd))
	}
}

// raw drives plugins through pkg/invoke for what libcni 1.1.2 cannot do.
type raw struct {
	paths    []string
	cacheDir string
	exec     invoke.Exec
}

func (r *raw) args(action string, rt *libcni.RuntimeConf) *invoke.Args {
	return &invoke.Args{
		Command:     action,
		ContainerID: rt.ContainerID,
		NetNS:       rt.NetNS,
		PluginArgs:  rt.Args,
		IfName:      rt.IfName,
		Path:        strings.Join(r.paths, string(os.PathListSeparator)),
	}
}

// buildOneConfig as libcni's: name, cniVersion, prevResult, then runtimeConfig.
func buildOneConfig(name, cniVersion string, orig *libcni.NetworkConfig, prevResult map[string]interface{}, rt *libcni.RuntimeConf) (*libcni.NetworkConfig, error) {
	inject := map[string]interface{}{"name": name, "cniVersion": cniVersion}
	if prevResult != nil {
		inject["prevResult"] = prevResult
	}
	conf, err := libcni.InjectConf(orig, inject)
	if err != nil {
		return nil, err
	}
	if rt == nil {
		return conf, nil
	}
	rc := map[string]interface{}{}
	for capability, supported := range conf.Network.Capabilities {
		if !supported {
			continue
		}
		if data, ok := rt.CapabilityArgs[capability]; ok {
			rc[capability] = data
		}
	}
	if len(rc) > 0 {
		return libcni.InjectConf(conf, map[string]interface{}{"runtimeConfig": rc})
	}
	return conf, nil
}

// fixupResult is invoke's fixupResultVersion: a result without cniVersion
// takes the config's.
func fixupResult(cniVersion string, out []byte) (map[string]interface{}, error) {
	var res map[string]interface{}
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("failed to unmarshal raw result: %w", err)
	}
	if res == nil {
		res = map[string]interface{}{}
	}
	if v, ok := res["cniVersion"].(string); !ok || v == "" {
		res["cniVersion"] = cniVersion
	}
	return res, nil
}

func (r *raw) addList(ctx context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) (map[string]interface{}, error) {
	var prev map[string]interface{}
	for _, net := range list.Plugins {
		pluginPath, err := r.exec.FindInPath(net.Network.Type, r.paths)
		if err != nil {
			return nil, fmt.Errorf("plugin type=%q failed (add): %w", net.Network.Type, err)
		}
		if err := utils.ValidateContainerID(rt.ContainerID); err != nil {
			return nil, err
		}
		if err := utils.ValidateNetworkName(list.Name); err != nil {
			return nil, err
		}
		if err := utils.ValidateInterfaceName(rt.IfName); err != nil {
			return nil, err
		}
		conf, err := buildOneConfig(list.Name, list.CNIVersion, net, prev, rt)
		if err != nil {
			return nil, err
		}
		out, err := r.exec.ExecPlugin(ctx, pluginPath, conf.Bytes, r.args("ADD", rt).AsEnv())
		if err != nil {
			return nil, fmt.Errorf("plugin type=%q failed (add): %w", net.Network.Type, err)
		}
		if prev, err = fixupResult(list.CNIVersion, out); err != nil {
			return nil, err
		}
	}
	if err := r.cacheAdd(prev, list, rt); err != nil {
		return nil, fmt.Errorf("failed to set network %q cached result: %w", list.Name, err)
	}
	return prev, nil
}

func (r *raw) cachePath(name string, rt *libcni.RuntimeConf) string {
	return filepath.Join(r.cacheDir, "results", fmt.Sprintf("%s-%s-%s", name, rt.ContainerID, rt.IfName))
}

// cacheAdd writes libcni's cachedInfo format (plus netns, as libcni >= 1.2).
func (r *raw) cacheAdd(result map[string]interface{}, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	cached := map[string]interface{}{
		"kind":           libcni.CNICacheV1,
		"containerId":    rt.ContainerID,
		"config":         list.Bytes,
		"ifName":         rt.IfName,
		"networkName":    list.Name,
		"netns":          rt.NetNS,
		"cniArgs":        rt.Args,
		"capabilityArgs": rt.CapabilityArgs,
		"result":         result,
	}
	b, err := json.Marshal(cached)
	if err != nil {
		return err
	}
	fname := r.cachePath(list.Name, rt)
	if err := os.MkdirAll(filepath.Dir(fname), 0o700); err != nil {
		return err
	}
	return ioutil.WriteFile(fname, b, 0o600)
}

func (r *raw) cachedResult(name string, rt *libcni.RuntimeConf) (map[string]interface{}, error) {
	b, err := ioutil.ReadFile(r.cachePath(name, rt))
	if err != nil {
		return nil, nil // libcni ignores read errors: no cached result
	}
	var cached struct {
		Kind   string                 `json:"kind"`
		Result map[string]interface{} `json:"result"`
	}
	if err := json.Unmarshal(b, &cached); err != nil || cached.Kind != libcni.CNICacheV1 {
		return nil, fmt.Errorf("failed to get network %q cached result", name)
	}
	return cached.Result, nil
}

func (r *raw) checkList(ctx context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	if list.DisableCheck {
		return nil
	}
	prev, err := r.cachedResult(list.Name, rt)
	if err != nil {
		return err
	}
	for _, net := range list.Plugins {
		pluginPath, err := r.exec.FindInPath(net.Network.Type, r.paths)
		if err != nil {
			return err
		}
		conf, err := buildOneConfig(list.Name, list.CNIVersion, net, prev, rt)
		if err != nil {
			return err
		}
		if _, err := r.exec.ExecPlugin(ctx, pluginPath, conf.Bytes, r.args("CHECK", rt).AsEnv()); err != nil {
			return err
		}
	}
	return nil
}

func (r *raw) delList(ctx context.Context, list *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	prev, err := r.cachedResult(list.Name, rt)
	if err != nil {
		return err
	}
	for i := len(list.Plugins) - 1; i >= 0; i-- {
		net := list.Plugins[i]
		pluginPath, err := r.exec.FindInPath(net.Network.Type, r.paths)
		if err != nil {
			return err
		}
		conf, err := buildOneConfig(list.Name, list.CNIVersion, net, prev, rt)
		if err != nil {
			return err
		}
		if _, err := r.exec.ExecPlugin(ctx, pluginPath, conf.Bytes, r.args("DEL", rt).AsEnv()); err != nil {
			return fmt.Errorf("plugin type=%q failed (delete): %w", net.Network.Type, err)
		}
	}
	_ = os.Remove(r.cachePath(list.Name, rt))
	return nil
}

// statusList is libcni >= 1.2 GetStatusNetworkList.
func (r *raw) statusList(ctx context.Context, list *libcni.NetworkConfigList) error {
	if gt, _ := version.GreaterThanOrEqualTo(list.CNIVersion, "1.1.0"); !gt {
		return nil
	}
	inject := map[string]interface{}{"name": list.Name, "cniVersion": list.CNIVersion}
	for _, net := range list.Plugins {
		conf, err := libcni.InjectConf(net, inject)
		if err != nil {
			return fmt.Errorf("failed to generate configuration to get plugin STATUS %s: %w", net.Network.Type, err)
		}
		pluginPath, err := r.exec.FindInPath(net.Network.Type, r.paths)
		if err != nil {
			return err
		}
		if _, err := r.exec.ExecPlugin(ctx, pluginPath, conf.Bytes, r.args("STATUS", &libcni.RuntimeConf{}).AsEnv()); err != nil {
			return err
		}
	}
	return nil
}

// gcList is the plugin half of libcni >= 1.2 GCNetworkList (see top comment).
// keys: "both" is what libcni injects; "spec"/"legacy" send one key only, as a
// runtime following the spec text (or its old misnamed key, cni#1101) would.
func (r *raw) gcList(ctx context.Context, list *libcni.NetworkConfigList, valid []map[string]string, keys string) error {
	if gt, _ := version.GreaterThanOrEqualTo(list.CNIVersion, "1.1.0"); !gt {
		return nil
	}
	inject := map[string]interface{}{"name": list.Name, "cniVersion": list.CNIVersion}
	switch keys {
	case "both":
		inject["cni.dev/valid-attachments"] = valid
		inject["cni.dev/attachments"] = valid
	case "spec":
		inject["cni.dev/valid-attachments"] = valid
	case "legacy":
		inject["cni.dev/attachments"] = valid
	default:
		return fmt.Errorf("-gc-keys: want both, spec or legacy, got %q", keys)
	}
	var errs []string
	var first error
	for _, net := range list.Plugins {
		conf, err := libcni.InjectConf(net, inject)
		if err != nil {
			return fmt.Errorf("failed to generate configuration to GC plugin %s: %w", net.Network.Type, err)
		}
		pluginPath, err := r.exec.FindInPath(net.Network.Type, r.paths)
		if err == nil {
			_, err = r.exec.ExecPlugin(ctx, pluginPath, conf.Bytes, r.args("GC", &libcni.RuntimeConf{}).AsEnv())
		}
		if err != nil {
			if first == nil {
				first = err
			}
			errs = append(errs, fmt.Sprintf("failed to GC plugin %s: %v", net.Network.Type, err))
		}
	}
	if first != nil {
		// keep the first plugin error reachable for errors.As (Go 1.19 has no errors.Join)
		return fmt.Errorf("%s: %w", strings.Join(errs, "; "), first)
	}
	return nil
}

// shimMain: see "Shim mode" in the top comment.
func shimMain(name string) {
	realDir := os.Getenv("LIBCNI_SHIM_REAL_DIR")
	if realDir == "" {
		realDir = "/usr/lib/cni"
	}
	stdin, err := ioutil.ReadAll(os.Stdin)
	if err != nil {
		os.Exit(shimErr(5, err.Error()))
	}
	cmd := os.Getenv("CNI_COMMAND")
	var conf map[string]interface{}
	is110 := false
	if json.Unmarshal(stdin, &conf) == nil && conf != nil && conf["cniVersion"] == "1.1.0" {
		is110 = true
	}
	if is110 && (cmd == "STATUS" || cmd == "GC") {
		os.Exit(0)
	}
	if is110 {
		conf["cniVersion"] = "1.0.0"
		if prev, ok := conf["prevResult"].(map[string]interface{}); ok {
			prev["cniVersion"] = "1.0.0"
		}
		stdin, _ = json.Marshal(conf)
	}
	c := exec.Command(filepath.Join(realDir, name))
	c.Stdin = bytes.NewReader(stdin)
	c.Stderr = os.Stderr
	out := &bytes.Buffer{}
	c.Stdout = out
	runErr := c.Run()
	res := out.Bytes()
	if is110 && len(bytes.TrimSpace(res)) > 0 {
		var m map[string]interface{}
		if json.Unmarshal(res, &m) == nil && m != nil {
			if _, ok := m["cniVersion"]; ok {
				m["cniVersion"] = "1.1.0"
			}
			res, _ = json.Marshal(m)
		}
	}
	_, _ = os.Stdout.Write(res)
	if runErr != nil {
		var ee *exec.ExitError
		if errors.As(runErr, &ee) {
			os.Exit(ee.ExitCode())
		}
		os.Exit(shimErr(5, runErr.Error()))
	}
}

func shimErr(code int, msg string) int {
	b, _ := json.Marshal(map[string]interface{}{"cniVersion": "1.0.0", "code": code, "msg": msg})
	fmt.Println(string(b))
	return 1
}
