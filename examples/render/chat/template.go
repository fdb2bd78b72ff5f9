package chat

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nikolalohinski/gonja/v2"
	"github.com/nikolalohinski/gonja/v2/exec"
)

//go:embed qwen3_tools.jinja
var qwen3Template string

// Qwen3Template is the built-in chat template (ChatML with Qwen3's <think>
// and Hermes-style <tool_call> conventions), the default of Config.Template.
func Qwen3Template() string { return qwen3Template }

// template renders messages to the prompt text through gonja (Jinja2).
type template struct {
	tpl *exec.Template
}

func newTemplate(source string) (*template, error) {
	tpl, err := gonja.FromString(source)
	if err != nil {
		return nil, fmt.Errorf("chat: chat template does not parse: %w", err)
	}
	return &template{tpl: tpl}, nil
}

// BadRequestError is an error in the request itself (the client can fix
// it); the server answers it with 400.
type BadRequestError struct{ Msg string }

func (e *BadRequestError) Error() string { return e.Msg }

func badRequest(format string, args ...any) error {
	return &BadRequestError{Msg: fmt.Sprintf(format, args...)}
}

func (t *template) render(req *Request) (string, error) {
	if len(req.Messages) == 0 {
		return "", badRequest("messages must not be empty")
	}
	lastUser := -1
	for i, m := range req.Messages {
		if m.Role == "user" {
			lastUser = i
		}
	}
	msgs := make([]map[string]any, len(req.Messages))
	for i := range req.Messages {
		m := &req.Messages[i]
		switch m.Role {
		case "system", "user", "assistant", "tool":
		default:
			return "", badRequest("messages[%d].role %q is not one of system, user, assistant, tool", i, m.Role)
		}
		text, err := m.Text()
		if err != nil {
			return "", badRequest("messages[%d].%v", i, err)
		}
		calls := make([]string, 0, len(m.ToolCalls))
		for j, c := range m.ToolCalls {
			args := json.RawMessage(c.Function.Arguments)
			if !json.Valid(args) {
				return "", badRequest("messages[%d].tool_calls[%d].function.arguments is not JSON: %q", i, j, c.Function.Arguments)
			}
			b, err := json.Marshal(struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			}{c.Function.Name, args})
			if err != nil {
				return "", badRequest("messages[%d].tool_calls[%d]: %v", i, j, err)
			}
			calls = append(calls, string(b))
		}
		reasoning := ""
		if m.Reasoning != nil {
			reasoning = strings.Trim(*m.Reasoning, "\n")
		}
		msgs[i] = map[string]any{
			"role":           m.Role,
			"content":        text,
			"tool_calls":     calls,
			"reasoning":      reasoning,
			"keep_reasoning": m.Role == "assistant" && i > lastUser && reasoning != "",
			"first_tool":     m.Role == "tool" && (i == 0 || req.Messages[i-1].Role != "tool"),
			"last_tool":      m.Role == "tool" && (i == len(req.Messages)-1 || req.Messages[i+1].Role != "tool"),
		}
	}
	tools := make([]string, 0, len(req.Tools))
	for i, tool := range req.Tools {
		if tool.Function.Name == "" {
			return "", badRequest("tools[%d].function.name is empty", i)
		}
		b, err := json.Marshal(tool)
		if err != nil {
			return "", badRequest("tools[%d]: %v", i, err)
		}
		tools = append(tools, string(b))
	}
	vars := map[string]any{}
	for k, v := range req.ChatTemplateKwargs {
		vars[k] = v
	}
	vars["messages"] = msgs
	vars["tools_json"] = tools
	vars["add_generation_prompt"] = req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
	vars["enable_thinking"] = req.EnableThinking()
	out, err := t.tpl.ExecuteToString(exec.NewContext(vars))
	if err != nil {
		return "", fmt.Errorf("chat: chat template failed: %w", err)
	}
	return out, nil
}
