// Help text, the machine spec of the command line, and the exit codes each
// command can return: one description of the CLI that `--help`, `q help`,
// `q cli-spec` (hidden; read by completions/generate and tests/docs) share.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace CLI {
class App;
class FormatterBase;
}  // namespace CLI

namespace cli {

struct Context;

// The formatter every command's --help uses: usage first, the description,
// the command's own arguments and options, the global options, the exit codes
// it can return; wrapped to the terminal (80 columns when not a terminal).
std::shared_ptr<CLI::FormatterBase> help_formatter();

// "q", "q send", "q dlq list".
std::string command_path(const CLI::App* app);

// The exit codes a command can return, with their meaning for it.
struct ExitCode {
  int code;
  std::string meaning;
};
std::vector<ExitCode> exit_codes(const std::string& path);

// The hidden `q cli-spec`: prints the whole command tree as JSON.
void add_cli_spec(CLI::App& app, Context& ctx);

// `q help [COMMAND...]` becomes `q [COMMAND...] --help`: rewrites `args`
// (argv without argv[0]) in place; false when it is not a help command.
bool rewrite_help_command(std::vector<std::string>& args);

// Wraps text to `width` columns, every line after the first indented by
// `indent` spaces and the first by `first` spaces.
std::string wrap(const std::string& text, std::size_t width, std::size_t indent, std::size_t first);

}  // namespace cli
