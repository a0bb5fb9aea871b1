#include "cli/confirm.hpp"

#include <unistd.h>

#include <cctype>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/context.hpp"
#include "cli/output.hpp"

namespace cli {

void add_destructive_flags(CLI::App* cmd, DestructiveFlags& flags) {
  cmd->add_flag("--dry-run", flags.dry_run, "Print what would go; remove nothing");
  cmd->add_flag("-y,--yes", flags.yes,
                "Do not ask for confirmation (it is asked only when standard input and "
                "standard error are terminals)");
}

bool confirmed(const DestructiveFlags& flags, const std::string& question) {
  if (flags.yes || !isatty(STDIN_FILENO) || !isatty(STDERR_FILENO)) return true;
  std::cerr << "q: " << question << " [y/N] " << std::flush;
  std::string answer;
  if (!std::getline(std::cin, answer)) {
    std::cerr << "\n";
    return false;
  }
  for (auto& c : answer) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  while (!answer.empty() && std::isspace(static_cast<unsigned char>(answer.back())))
    answer.pop_back();
  return answer == "y" || answer == "yes";
}

bool may_destroy(const DestructiveFlags& flags, Context& ctx, const Destruction& what) {
  if (flags.dry_run) {
    ctx.out += what.would + "\n";
    return false;
  }
  if (confirmed(flags, what.question)) return true;
  print_error(what.refused);
  ctx.exit = kEmpty;
  return false;
}

}  // namespace cli
