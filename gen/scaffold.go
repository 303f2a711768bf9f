package gen

import (
	"bytes"
	"fmt"
	"go/format"
	"strings"

	"github.com/idemgen/idemgen/templates"
)

type scaffoldPhase struct {
	GoName, Doc, Params, Results string
	Final                        bool
}

// renderScaffolds renders one user-owned phase file per idempotent
// operation, named after the operationId in snake_case.
func renderScaffolds(cfg Config, r *ir) ([]OutputFile, error) {
	tmpl, err := templates.Load(templates.Scaffold, cfg.Templates)
	if err != nil {
		return nil, err
	}
	var files []OutputFile
	for _, o := range r.Idempotent {
		var phases []scaffoldPhase
		for i, p := range o.Phases {
			params := "ctx context.Context, tx pgx.Tx, request " + o.RequestType + ", state *" + o.StateType()
			if p.Foreign {
				params = "ctx context.Context, key string, request " + o.RequestType + ", state *" + o.StateType()
			}
			results := "error"
			if p.Final {
				results = "(" + o.ResponseType + ", error)"
			}
			phases = append(phases, scaffoldPhase{GoName: p.GoName, Doc: phaseDoc(o, i, p), Params: params, Results: results, Final: p.Final})
		}
		var buf bytes.Buffer
		err := tmpl.Execute(&buf, map[string]any{
			"Package": r.Package, "OperationID": o.Spec.OperationID, "Iface": o.PhasesIface(),
			"State": o.StateType(), "Impl": o.ImplType(), "Phases": phases,
		})
		if err != nil {
			return nil, fmt.Errorf("gen: scaffold for %s: %w", o.Spec.OperationID, err)
		}
		src, err := format.Source(buf.Bytes())
		if err != nil {
			return nil, fmt.Errorf("gen: scaffold for %s is not valid Go (check your template): %w", o.Spec.OperationID, err)
		}
		files = append(files, OutputFile{Path: snake(o.GoName) + "_phases.go", Data: src, Owned: true})
	}
	return files, nil
}

// snake turns CreatePayment into create_payment.
func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
