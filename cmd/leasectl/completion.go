package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// shells are the shells `leasectl completion` writes a script for.
var shells = map[string]func(io.Writer, []completionCommand) error{
	"bash": writeBashCompletion,
	"zsh":  writeZshCompletion,
	"fish": writeFishCompletion,
}

// completionCommand is what a completion script knows of one command.
type completionCommand struct {
	name, summary string
	flags         []*flag.Flag
}

func cmdCompletion(ctx context.Context, e *env, args []string) error {
	fs := e.flags("completion")
	pos, err := parse(fs, args, "SHELL")
	if err != nil {
		return err
	}
	write, ok := shells[pos[0]]
	if !ok {
		return flagError(fs, "unknown shell %q: want bash, zsh or fish", pos[0])
	}
	cmds, err := completionCommands(ctx, e)
	if err != nil {
		return err
	}
	if err := write(e.stdout, cmds); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// completionCommands returns every command with its flags, which each
// command defines when it runs: it is run with --help, which stops it once
// its FlagSet is made.
func completionCommands(ctx context.Context, e *env) ([]completionCommand, error) {
	var out []completionCommand
	for _, c := range commands() {
		scratch := &env{getenv: func(string) string { return "" }, stdout: io.Discard, stderr: io.Discard, idTokens: e.idTokens, cmd: &c}
		err := c.run(ctx, scratch, []string{"--help"})
		if !errors.Is(err, flag.ErrHelp) || scratch.fs == nil {
			return nil, fmt.Errorf("completion: %s --help did not stop at its flags: %v", c.name, err)
		}
		cc := completionCommand{name: c.name, summary: c.summary}
		scratch.fs.VisitAll(func(f *flag.Flag) { cc.flags = append(cc.flags, f) })
		out = append(out, cc)
	}
	out = append(out, completionCommand{name: "help", summary: "show the help of a command"})
	return out, nil
}

// completionDescription is a flag's usage, first clause, without the
// characters the shells' quoting would need escaped.
func completionDescription(s string) string {
	_, s = flag.UnquoteUsage(&flag.Flag{Usage: s})
	if i := strings.IndexAny(s, ";("); i > 0 {
		s = s[:i]
	}
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\'':
			return '’' // no quote to escape
		case strings.ContainsRune("\"`[]:\\$", r):
			return -1
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}

// takesFile reports whether a flag's value is a file name.
func takesFile(f *flag.Flag) bool { return f.Name == "token-file" }

func writeBashCompletion(w io.Writer, cmds []completionCommand) error {
	var b strings.Builder
	var names []string
	for _, c := range cmds {
		names = append(names, c.name)
	}
	b.WriteString("# bash completion for leasectl. Load it with: source <(leasectl completion bash)\n")
	b.WriteString("_leasectl() {\n")
	b.WriteString("    local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"${COMP_WORDS[COMP_CWORD-1]}\" i cmd=\"\" at=0\n")
	b.WriteString("    COMPREPLY=()\n")
	b.WriteString("    # The command is the first word that is no global flag or its value.\n")
	b.WriteString("    for ((i = 1; i < COMP_CWORD; i++)); do\n        case \"${COMP_WORDS[i]}\" in\n")
	b.WriteString("            --url|--token|--token-file) [[ ${COMP_WORDS[i+1]} == = ]] && ((i++)); ((i++)) ;;\n")
	b.WriteString("            -*|=) ;;\n            *) cmd=\"${COMP_WORDS[i]}\" at=$i; break ;;\n        esac\n    done\n")
	b.WriteString("    if [[ -z $cmd ]]; then\n        case \"$prev\" in\n")
	b.WriteString("            --token-file) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n            --url|--token) return ;;\n        esac\n")
	fmt.Fprintf(&b, "        if [[ $cur == -* ]]; then\n            COMPREPLY=($(compgen -W %q -- \"$cur\"))\n", "--"+strings.Join(globalFlags, " --")+" --help --version")
	fmt.Fprintf(&b, "        else\n            COMPREPLY=($(compgen -W %q -- \"$cur\"))\n        fi\n        return\n    fi\n", strings.Join(names, " "))
	b.WriteString("    for ((i = at + 1; i < COMP_CWORD; i++)); do\n        [[ ${COMP_WORDS[i]} == -- ]] && return # CMD of run: the shell's own completion\n    done\n")
	b.WriteString("    case \"$prev\" in\n")
	b.WriteString("        --token-file) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n")
	var valued []string
	for _, c := range cmds {
		for _, f := range c.flags {
			if !isBoolFlag(f) && !takesFile(f) && !slices.Contains(valued, "--"+f.Name) {
				valued = append(valued, "--"+f.Name)
			}
		}
	}
	slices.Sort(valued)
	fmt.Fprintf(&b, "        %s) return ;; # a value: nothing to offer\n", strings.Join(valued, "|"))
	b.WriteString("    esac\n")
	b.WriteString("    local words=\"\"\n    case \"$cmd\" in\n")
	for _, c := range cmds {
		switch c.name {
		case "help":
			fmt.Fprintf(&b, "        help) [[ $COMP_CWORD -eq $((at + 1)) ]] && words=%q ;;\n", strings.Join(names, " "))
		case "completion":
			b.WriteString("        completion) [[ $COMP_CWORD -eq $((at + 1)) ]] && words=\"bash zsh fish\" ;;\n")
		default:
			var fl []string
			for _, f := range c.flags {
				fl = append(fl, "--"+f.Name)
			}
			fmt.Fprintf(&b, "        %s) words=%q ;;\n", c.name, strings.Join(append(fl, "--help"), " "))
		}
	}
	b.WriteString("    esac\n")
	b.WriteString("    COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n")
	b.WriteString("}\ncomplete -o default -F _leasectl leasectl\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func writeZshCompletion(w io.Writer, cmds []completionCommand) error {
	var b strings.Builder
	b.WriteString("#compdef leasectl\n# zsh completion for leasectl. Install it as _leasectl in a directory of $fpath:\n")
	b.WriteString("#   leasectl completion zsh > \"${fpath[1]}/_leasectl\"\n\n")
	b.WriteString("_leasectl() {\n    local -a commands\n    commands=(\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "        '%s:%s'\n", c.name, completionDescription(c.summary))
	}
	b.WriteString("    )\n")
	b.WriteString("    local curcontext=\"$curcontext\" state line\n    _arguments -C \\\n")
	for _, c := range cmds {
		if c.name != "get" { // the global flags, as every command that calls the service has them
			continue
		}
		for _, f := range c.flags {
			b.WriteString("        " + zshFlagSpec(f) + " \\\n")
		}
	}
	b.WriteString("        '1:command:->command' '*::argument:->argument'\n")
	b.WriteString("    if [[ $state == command ]]; then\n        _describe -t commands 'leasectl command' commands\n        return\n    fi\n")
	b.WriteString("    case $words[1] in\n")
	for _, c := range cmds {
		switch c.name {
		case "help":
			b.WriteString("        help) _describe -t commands 'leasectl command' commands ;;\n")
		case "completion":
			b.WriteString("        completion) _values 'shell' bash zsh fish ;;\n")
		default:
			fmt.Fprintf(&b, "        %s) _arguments -S \\\n", c.name)
			for _, f := range c.flags {
				b.WriteString("                " + zshFlagSpec(f) + " \\\n")
			}
			if c.name == "run" {
				b.WriteString("                '*::command:_normal' ;;\n")
			} else {
				b.WriteString("                '*:argument: ' ;;\n")
			}
		}
	}
	b.WriteString("    esac\n}\n\ncompdef _leasectl leasectl\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// zshFlagSpec is the _arguments spec of a flag.
func zshFlagSpec(f *flag.Flag) string {
	spec := fmt.Sprintf("'--%s[%s]", f.Name, completionDescription(f.Usage))
	switch {
	case isBoolFlag(f):
	case takesFile(f):
		spec += ":file:_files"
	default:
		spec += ":value: "
	}
	return spec + "'"
}

func writeFishCompletion(w io.Writer, cmds []completionCommand) error {
	var b strings.Builder
	var names []string
	for _, c := range cmds {
		names = append(names, c.name)
	}
	b.WriteString("# fish completion for leasectl. Install it with:\n#   leasectl completion fish > ~/.config/fish/completions/leasectl.fish\n")
	b.WriteString("complete -c leasectl -f\n")
	for _, c := range cmds {
		fmt.Fprintf(&b, "complete -c leasectl -n '__fish_use_subcommand' -a %s -d '%s'\n", c.name, completionDescription(c.summary))
	}
	for _, c := range cmds {
		if c.name != "get" { // the global flags, before the command too
			continue
		}
		for _, f := range c.flags {
			b.WriteString(fishFlagLine("'__fish_use_subcommand'", f))
		}
	}
	for _, c := range cmds {
		cond := fmt.Sprintf("'__fish_seen_subcommand_from %s'", c.name)
		switch c.name {
		case "help":
			fmt.Fprintf(&b, "complete -c leasectl -n %s -a '%s'\n", cond, strings.Join(names, " "))
		case "completion":
			fmt.Fprintf(&b, "complete -c leasectl -n %s -a 'bash zsh fish'\n", cond)
		}
		for _, f := range c.flags {
			b.WriteString(fishFlagLine(cond, f))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// fishFlagLine is the complete line of a flag under the condition cond.
func fishFlagLine(cond string, f *flag.Flag) string {
	line := fmt.Sprintf("complete -c leasectl -n %s -l %s", cond, f.Name)
	switch {
	case isBoolFlag(f):
	case takesFile(f):
		line += " -r -F"
	default:
		line += " -r"
	}
	return line + fmt.Sprintf(" -d '%s'\n", completionDescription(f.Usage))
}
