// q config QUEUE [settings]: show or change a queue's settings.
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "cli/context.hpp"
#include "cli/settings_flags.hpp"

namespace cli {

void add_config(CLI::App& app, Context& ctx) {
  auto config_flags = std::make_shared<SettingsFlags>();
  if (!ctx.wants("config")) return;
  auto* config = app.add_subcommand(
      "config", "Show a queue's settings, or change those given (they apply from now on)");
  add_settings(config, *config_flags);
  config->add_flag("--json", config_flags->json, "Print the settings as one JSON object");
  auto* fifo = config->add_flag("--fifo", config_flags->fifo,
                                "Fails unless the queue is FIFO: a queue's kind cannot change");
  config
      ->add_flag("--standard", config_flags->standard,
                 "Fails unless the queue is standard: a queue's kind cannot change")
      ->excludes(fifo);
  config->callback([config_flags, &ctx] {
    auto change = config_flags->change();
    auto settings = ctx.open()->configure(config_flags->queue, change);
    ctx.out += settings_text(config_flags->queue, settings, config_flags->json);
  });
}

}  // namespace cli
