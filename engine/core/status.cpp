// Check-failure reporting for ZT_CHECK.
#include "engine/core/status.h"

#include <cstdio>
#include <new>

namespace zt {

int exit_code_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const UserError&) {
    return 2;
  } catch (const PeerFailure& e) {
    return e.code;
  } catch (...) {
    return 1;
  }
}

void print_error(const std::exception_ptr& error, int rank) {
  const std::string who = rank >= 0 ? fmt::format("rank {}: ", rank) : "";
  try {
    std::rethrow_exception(error);
  } catch (const PeerFailure&) {
  } catch (const UserError& e) {
    std::fprintf(stderr, "ztrain: error: %s%s\n", who.c_str(), e.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "ztrain: failure: %sout of memory\n", who.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ztrain: failure: %s%s\n", who.c_str(), e.what());
  } catch (...) {
    std::fprintf(stderr, "ztrain: failure: %sunknown error\n", who.c_str());
  }
}

void throw_check_failure(const char* file, int line, const char* cond, const std::string& msg) {
  throw RuntimeFailure(fmt::format("{}:{}: check failed: {}: {}", file, line, cond, msg));
}

}  // namespace zt
