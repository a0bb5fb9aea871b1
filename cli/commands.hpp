// Each command lives in cli/cmd_<name>.cpp: add_<name>() declares its options
// and runs it: parse -> one libq call -> format. Only the command being run
// gets its options declared (Context::wants): building every command's options
// took a quarter of a one-shot command's time.
#pragma once

namespace CLI {
class App;
}

namespace cli {

struct Context;

void add_create(CLI::App& app, Context& ctx);
void add_config(CLI::App& app, Context& ctx);
void add_delete(CLI::App& app, Context& ctx);
void add_list(CLI::App& app, Context& ctx);
void add_send(CLI::App& app, Context& ctx);
void add_receive(CLI::App& app, Context& ctx);
void add_ack(CLI::App& app, Context& ctx);
void add_extend(CLI::App& app, Context& ctx);
void add_nack(CLI::App& app, Context& ctx);
void add_peek(CLI::App& app, Context& ctx);
void add_show(CLI::App& app, Context& ctx);
void add_pause(CLI::App& app, Context& ctx);
void add_resume(CLI::App& app, Context& ctx);
void add_purge(CLI::App& app, Context& ctx);
void add_stats(CLI::App& app, Context& ctx);
void add_dlq(CLI::App& app, Context& ctx);
void add_redrive(CLI::App& app, Context& ctx);
void add_work(CLI::App& app, Context& ctx);
void add_top(CLI::App& app, Context& ctx);
void add_check(CLI::App& app, Context& ctx);
void add_backup(CLI::App& app, Context& ctx);
void add_verify(CLI::App& app, Context& ctx);
void add_export(CLI::App& app, Context& ctx);
void add_import(CLI::App& app, Context& ctx);
void add_serve(CLI::App& app, Context& ctx);

int run(int argc, char** argv);

}  // namespace cli
