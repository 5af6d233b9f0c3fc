// Check-failure reporting for ZT_CHECK.
#include "engine/core/status.h"

#include <cstdio>
#include <new>

#include "engine/core/redact.h"

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

bool is_agreed_failure(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const AgreedFailure&) {
    return true;
  } catch (...) {
    return false;
  }
}

void print_error(const std::exception_ptr& error, int rank) {
  const std::string who = rank >= 0 ? fmt::format("rank {}: ", rank) : "";
  std::string line;
  try {
    std::rethrow_exception(error);
  } catch (const PeerFailure&) {
    return;
  } catch (const UserError& e) {
    line = fmt::format("ztrain: error: {}{}\n", who, e.what());
  } catch (const std::bad_alloc&) {
    line = fmt::format("ztrain: failure: {}out of memory\n", who);
  } catch (const std::exception& e) {
    line = fmt::format("ztrain: failure: {}{}\n", who, e.what());
  } catch (...) {
    line = fmt::format("ztrain: failure: {}unknown error\n", who);
  }
  std::fputs(redact_url_passwords(line).c_str(), stderr);
}

void throw_check_failure(const char* file, int line, const char* cond, const std::string& msg) {
  throw RuntimeFailure(fmt::format("{}:{}: check failed: {}: {}", file, line, cond, msg));
}

}  // namespace zt
