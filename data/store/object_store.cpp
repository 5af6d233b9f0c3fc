// ObjectStore's defaults for stores that cannot be written (HTTP servers).
#include "data/store/object_store.h"

#include "engine/core/status.h"

namespace zt::data {

void ObjectStore::put(const std::string& name, const std::string&) {
  user_error("{}: this store cannot be written (checkpoints go to a local directory or s3://)", describe(name));
}

std::vector<std::string> ObjectStore::list(const std::string& prefix) {
  user_error("{}: this store cannot be listed (checkpoints go to a local directory or s3://)", describe(prefix));
}

void ObjectStore::remove(const std::string& name) {
  user_error("{}: this store cannot be written (checkpoints go to a local directory or s3://)", describe(name));
}

}  // namespace zt::data
