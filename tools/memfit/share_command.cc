// memfit share NAME: who is in a lease group, and what each holds (memfit/share/share_group.h).
#include <fmt/format.h>

#include <ostream>

#include "commands.h"
#include "memfit/core/bytes.h"
#include "memfit/core/json.h"
#include "memfit/share/share_group.h"

namespace memfit::cli {
namespace {

struct ShareOptions {
  std::string name;
  int device = -1;  // -1: every device the group has a table on
  bool json = false;
};

Json member_json(const ShareMemberInfo& m) {
  Json j;
  j["pid"] = m.pid;
  j["command"] = m.command;
  j["lease_bytes"] = m.lease_bytes;
  j["bytes_in_use"] = m.bytes_in_use;
  j["peak_bytes_in_use"] = m.peak_bytes_in_use;
  j["pool_bytes"] = m.pool_bytes;
  j["fair_share_bytes"] = m.fair_share_bytes;
  j["limit_bytes"] = m.limit_bytes;
  j["weight"] = m.weight;
  j["quota_bytes"] = m.quota_bytes;
  j["waiting_for_bytes"] = m.demand_bytes;
  return j;
}

}  // namespace

Json share_group_json(const ShareGroupInfo& group) {
  Json j;
  j["group"] = group.name;
  j["device"] = group.device;
  j["device_name"] = group.device_name;
  j["capacity_bytes"] = group.capacity_bytes;
  j["leased_bytes"] = group.leased_bytes;
  Json members = Json::array();
  for (const ShareMemberInfo& m : group.members) members.push_back(member_json(m));
  j["members"] = std::move(members);
  return j;
}

Action add_share_command(CLI::App& app, Io& io) {
  auto options = std::make_shared<ShareOptions>();
  app.add_option("name", options->name, "The group's name (the MEMFIT_SHARE of its members)")->required();
  app.add_option("--device", options->device, "Only this device's table (default: every device)")
      ->check(CLI::Range(0, 9999));
  app.add_flag("--json", options->json, "Print one JSON object");
  return [options, &io]() -> int {
    if (Status valid = validate_share_name(options->name); !valid.ok()) return fail(io, valid.error());
    ShareTables read = read_share_tables(options->name);
    std::vector<ShareGroupInfo> tables;
    for (ShareGroupInfo& g : read.groups)
      if (options->device < 0 || g.device == options->device) tables.push_back(std::move(g));
    // A file of the group's name that is not a lease table is named with what is wrong with it (and how to
    // clear it), not reported as no group: the error when nothing else reads, a warning beside tables.
    std::vector<Error> unreadable;
    for (UnreadableShareTable& u : read.unreadable)
      if (options->device < 0 || u.device == options->device) unreadable.push_back(std::move(u.error));
    for (size_t k = tables.empty() ? 1 : 0; k < unreadable.size(); ++k)
      io.err << "memfit: warning: " << unreadable[k].message() << "\n";
    if (tables.empty() && !unreadable.empty()) return fail(io, unreadable.front());
    if (tables.empty()) {
      return fail(io, not_found(options->device < 0
                                    ? fmt::format("no share group '{}' on this machine", options->name)
                                    : fmt::format("no share group '{}' on device {}", options->name,
                                                  options->device)));
    }
    if (options->json) {
      // One table: its members at the top level; several devices: each under "devices" as well.
      Json j = share_group_json(tables.front());
      if (tables.size() > 1) {
        Json all_members = Json::array();
        Json devices = Json::array();
        for (const ShareGroupInfo& g : tables) {
          const Json one = share_group_json(g);
          for (Json m : one["members"]) {
            m["device"] = g.device;
            all_members.push_back(std::move(m));
          }
          devices.push_back(one);
        }
        j["members"] = std::move(all_members);
        j["devices"] = std::move(devices);
      }
      io.out << json_to_output(j);
      return kExitOk;
    }
    for (const ShareGroupInfo& g : tables) {
      io.out << fmt::format("share group '{}' on device {} ({}): {} of {} leased, {} member{}\n", g.name,
                            g.device, g.device_name, format_bytes(g.leased_bytes),
                            format_bytes(g.capacity_bytes), g.members.size(),
                            g.members.size() == 1 ? "" : "s");
      if (g.members.empty()) continue;
      io.out << fmt::format("  {:>8}  {:<16} {:>11} {:>11} {:>11} {:>11}\n", "pid", "command", "lease",
                            "pool", "in use", "fair share");
      for (const ShareMemberInfo& m : g.members) {
        io.out << fmt::format(
            "  {:>8}  {:<16} {:>11} {:>11} {:>11} {:>11}{}\n", m.pid, m.command.substr(0, 16),
            format_bytes(m.lease_bytes), format_bytes(m.pool_bytes), format_bytes(m.bytes_in_use),
            format_bytes(m.fair_share_bytes),
            m.demand_bytes ? fmt::format("  waiting for {}", format_bytes(m.demand_bytes)) : "");
      }
    }
    return kExitOk;
  };
}

}  // namespace memfit::cli
