package main

import (
	"bytes"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersionCommand runs `idemgen version` in this test binary, whose build
// info holds the module and the dependencies actually linked.
func TestVersionCommand(t *testing.T) {
	code, out, errs := runCLI(t, "version")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	req := regexp.MustCompile(`(?m)^\s*(github\.com/oapi-codegen/oapi-codegen/v\d+) (v\S+)`).FindStringSubmatch(string(mod))
	if req == nil {
		t.Fatal("go.mod requires no oapi-codegen")
	}
	for _, want := range []string{
		"idemgen      github.com/idemgen/idemgen ",
		"go           " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n",
		"oapi-codegen " + req[1] + " " + req[2] + "\n",
		"revision     ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if code, _, _ := runCLI(t, "version", "extra"); code != 2 {
		t.Errorf("version with an argument: exit %d; want 2", code)
	}
}

func TestWriteVersion(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{{
		name: "release with VCS stamp",
		bi: debug.BuildInfo{
			GoVersion: "go1.26.8",
			Main:      debug.Module{Path: "github.com/idemgen/idemgen", Version: "v0.3.0"},
			Deps: []*debug.Module{
				{Path: "github.com/oapi-codegen/runtime", Version: "v1.9.0"},
				{Path: "github.com/oapi-codegen/oapi-codegen/v2", Version: "v2.8.2"},
			},
			Settings: []debug.BuildSetting{
				{Key: "vcs.revision", Value: "5f4c523c"},
				{Key: "vcs.time", Value: "2026-11-30T15:55:35Z"},
				{Key: "vcs.modified", Value: "true"},
			},
		},
		want: "idemgen      github.com/idemgen/idemgen v0.3.0\n" +
			"revision     5f4c523c (modified)\n" +
			"committed    2026-11-30T15:55:35Z\n" +
			"go           go1.26.8 " + runtime.GOOS + "/" + runtime.GOARCH + "\n" +
			"oapi-codegen github.com/oapi-codegen/oapi-codegen/v2 v2.8.2\n",
	}, {
		name: "go tool in a module that replaces idemgen and oapi-codegen",
		bi: debug.BuildInfo{
			GoVersion: "go1.26.8",
			Main: debug.Module{Path: "github.com/idemgen/idemgen", Version: "v0.0.0",
				Replace: &debug.Module{Path: "/src/idemgen", Version: "(devel)"}},
			Deps: []*debug.Module{{Path: "github.com/oapi-codegen/oapi-codegen/v2", Version: "v2.8.2",
				Replace: &debug.Module{Path: "github.com/fork/oapi-codegen/v2", Version: "v2.8.3"}}},
		},
		want: "idemgen      github.com/idemgen/idemgen v0.0.0 => /src/idemgen (devel)\n" +
			"revision     unknown (no VCS information in the build; see -buildvcs in 'go help build')\n" +
			"go           go1.26.8 " + runtime.GOOS + "/" + runtime.GOARCH + "\n" +
			"oapi-codegen github.com/oapi-codegen/oapi-codegen/v2 v2.8.2 => github.com/fork/oapi-codegen/v2 v2.8.3\n",
	}} {
		var buf bytes.Buffer
		writeVersion(&buf, &tc.bi)
		if buf.String() != tc.want {
			t.Errorf("%s:\ngot\n%swant\n%s", tc.name, buf.String(), tc.want)
		}
	}
}
